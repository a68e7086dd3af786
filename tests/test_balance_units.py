"""Root-free parts of the load-balance work: spec fields, the tc/sysctl plan, the path-map analysis,
the elephant sender/receiver on loopback, the qdisc sampler's netlink parser, impair's input."""

from __future__ import annotations

import json
import math
import random
import socket
import struct
import subprocess
import sys
import time

import pytest

from hpnlab.model import capacity
from hpnlab.errors import SpecError
from hpnlab.model.spec import parse_spec
from hpnlab.traffic.run import balance, impair
from hpnlab.traffic.run.experiment import node_configs


def _cfgs(**over):
    return node_configs(parse_spec({"name": "u", "segments": 2, "hosts_per_segment": 4, "rails": 1,
                                    "aggs_per_plane": 4, **over}))


# --- spec and plan -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("data, field", [
    ({"links": {"access": {"rate_mbit": 0}}}, "links.access.rate_mbit"),
    ({"links": {"access": {"rate_mbit": 10, "queue_kb": 1}}}, "links.access.queue_kb"),
    ({"links": {"fabric": {"rate_mbit": 10}}}, "links.fabric"),
    ({"hash": {"seed": 0}}, "hash.seed"),
    ({"hash": {"seed": True}}, "hash.seed"),
    ({"hash": {"seed": "random"}}, "hash.seed"),
    ({"hash": {"policy": "l2"}}, "hash.policy"),
])
def test_bad_capacity_and_hash_fields_name_the_field(data, field):
    with pytest.raises(SpecError) as e:
        parse_spec({"name": "x", **data})
    assert f"'{field}'" in str(e.value) and "\n" not in str(e.value)


def test_every_link_end_of_a_class_is_shaped_and_others_are_not():
    cfgs = _cfgs(links={"access": {"rate_mbit": 20, "queue_kb": 128}})
    for c in cfgs.values():
        for i in c.interfaces:
            assert (i.shape is not None) == (i.kind == "access")
    tor = cfgs["s0r0a"].plain()  # the node's own plan reads its node.json
    lines = capacity.tc_batch(tor)
    assert len(lines) == 4 and all("tbf rate 20000kbit" in ln and "limit 131072" in ln for ln in lines)
    assert capacity.tc_batch(cfgs["agg0-0"].plain()) == []


def test_seeds_shared_per_switch_and_fixed():
    key = "net.ipv4.fib_multipath_hash_seed"
    routers = lambda c: {n: v.sysctls[key] for n, v in c.items() if v.role != "host"}  # noqa: E731
    assert len(set(routers(_cfgs()).values())) == 1
    per = routers(_cfgs(hash={"seed": "per-switch"}))
    assert len(set(per.values())) == len(per)
    assert set(routers(_cfgs(hash={"seed": 99, "policy": "l3"})).values()) == {99}
    # switches: policy 3 (custom fields: the packet is always dissected, never the sender's skb hash)
    sw = _cfgs(hash={"policy": "l3"})["agg0-0"].sysctls
    assert sw["net.ipv4.fib_multipath_hash_policy"] == 3 and sw["net.ipv4.fib_multipath_hash_fields"] == 0x03
    assert _cfgs()["agg0-0"].sysctls["net.ipv4.fib_multipath_hash_fields"] == 0x37
    hosts = [v.sysctls for v in _cfgs().values() if v.role == "host"]
    assert all(h["net.ipv4.fib_multipath_hash_policy"] == 1 for h in hosts)  # the NIC hashes on L4 always
    assert len({h[key] for h in hosts}) == len(hosts) and all(h[key] for h in hosts)
    assert _cfgs()["agg0-0"].sysctls[key] == _cfgs()["agg0-0"].sysctls[key]  # never random


@pytest.mark.parametrize("text, kbit", [("100mbit", 100_000), ("500kbit", 500), ("1gbit", 1_000_000), ("20", 20_000),
                                        ("2.5mbit", 2500)])
def test_parse_rate(text, kbit):
    assert capacity.parse_rate(text) == kbit


@pytest.mark.parametrize("text", ["fast", "0", "-1mbit", "nanmbit", "200gbit"])
def test_parse_rate_refuses(text):
    with pytest.raises(ValueError):
        capacity.parse_rate(text)


def test_impair_settings():
    assert impair.parse(["rate=10mbit", "loss=0.5", "queue=64"]) == {"rate_kbit": 10_000, "loss_pct": 0.5,
                                                                     "queue_bytes": 65536}
    assert impair.parse(["delay=10ms"]) == {"delay_ms": 10.0}
    for bad in (["loss=200"], ["delay=-1ms"], ["rate"], [], ["queue=64"], ["loss=inf"]):
        with pytest.raises(SpecError):
            impair.parse(bad)


# --- the path-map analysis -----------------------------------------------------------------------------------
def synthetic_map(cfgs: dict, pool: int, seed: int = 3) -> list[dict]:
    """A map as the probes would give it: per 5-tuple a port, an agg of that port's ToR, and the far
    ToR that agg's links lead to (dual-plane: the same plane; Clos: either ToR of the set)."""
    rng = random.Random(seed)
    rows = []
    for src in balance.hosts_of(cfgs):
        nic = cfgs[src].nics[0]
        for dst in balance.peers(cfgs, src):
            dtors = cfgs[dst].nics[0].tors
            for sp in range(pool):
                p = rng.randrange(2)
                tor = nic.tors[p]
                aggs = [i.peer for i in cfgs[tor].interfaces if i.kind == "uplink"]
                agg = rng.choice(aggs)
                far = [t for t in dtors if any(i.peer == t for i in cfgs[agg].interfaces)]
                rows.append({"src": src, "dst": dst, "sport": 30000 + sp, "port": nic.ports[p], "tor": tor,
                             "agg": agg, "dst_tor": rng.choice(far)})
    return rows


def test_groups_follow_the_topology():
    dp = balance.groups(_cfgs())
    clos = balance.groups(_cfgs(tier2="clos", aggs_per_plane=8))
    size = lambda g, t: {len(v) for (tier, _o), v in g.items() if tier == t}  # noqa: E731
    assert size(dp, "tor-up") == {4} and size(clos, "tor-up") == {8}
    assert size(dp, "agg-down") == {1} and size(clos, "agg-down") == {2}  # dual-plane: no choice at the agg
    assert size(dp, "tor-down") == {2} == size(clos, "host-up")


def test_ratio_and_stats():
    assert balance.ratio([6, 2]) == 3 and math.isinf(balance.ratio([4, 0]))
    st = balance.stats([1.0, 1.0, 3.0, math.inf])
    assert st["median"] == 2.0 and st["max"] is None and st["infinite"] == 1


def test_disjoint_selection_is_even_where_hashing_is_not():
    cfgs = _cfgs()
    rows = synthetic_map(cfgs, 32)
    h = balance.analyse(rows, cfgs, sets=100, select="hash")
    d = balance.analyse(rows, cfgs, sets=100, select="disjoint")
    assert h["flows_per_set"] == 8 * 4 * 2 and h["map"]["answered"] == len(rows)
    assert d["downlink_ratio"]["max"] == 1.0  # one flow per plane to every peer: each NIC port gets half
    assert h["downlink_ratio"]["p90"] is None or h["downlink_ratio"]["p90"] > 1.0
    assert d["tiers"]["tor-up"]["ratio"]["median"] <= h["tiers"]["tor-up"]["ratio"]["median"]


def test_unanswered_probes_are_not_used_and_a_thin_map_is_refused():
    cfgs = _cfgs()
    rows = synthetic_map(cfgs, 2)
    rows[0]["agg"] = "?"
    assert len(balance.complete(rows)) == len(rows) - 1
    with pytest.raises(ValueError, match="probe a larger pool"):
        balance.choose(balance.index(rows), cfgs, 2, "hash", random.Random(1))


# --- node tools without a lab --------------------------------------------------------------------------------
def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("select", ["hash", "disjoint"])
def test_elephant_delivers_every_byte_on_loopback(tmp_path, select):
    port = _free_port()
    srv = subprocess.Popen([sys.executable, "-m", "hpnlab.node.programs.elephant", "serve", "--bind", "127.0.0.1",
                            "--port", str(port), "--duration", "20", "--out", str(tmp_path / "rx.json")])
    time.sleep(0.5)
    base = _free_port()
    flows = ",".join(f"127.0.0.1:{base + i}" for i in range(3))
    r = subprocess.run([sys.executable, "-m", "hpnlab.node.programs.elephant", "send", "--src", "127.0.0.1", "--port", str(port),
                        "--flows", flows, "--size", str(1 << 20), "--select", select, "--duration", "15",
                        "--out", str(tmp_path / "tx.json")], timeout=30)
    srv.terminate()
    srv.wait(timeout=10)
    assert r.returncode == 0
    tx = json.loads((tmp_path / "tx.json").read_text())
    rx = json.loads((tmp_path / "rx.json").read_text())
    assert tx["complete"] and tx["completion_s"] > 0
    assert sum(f["sent"] for f in tx["flows"]) == 3 << 20 == sum(f["bytes"] for f in rx["flows"])
    assert {f["sport"] for f in rx["flows"]} == {base, base + 1, base + 2}  # the source ports we asked for
    if select == "hash":
        assert all(f["sent"] == 1 << 20 for f in tx["flows"])


def test_a_stopped_elephant_sender_stops_waiting_for_room_in_its_socket():
    """A stop while a chunk is half-queued ends the wait: a peer that stopped reading (or a path that is gone)
    must not hold a stopped sender until TCP gives up (a VM's QoS test waited 40 s on one)."""
    import threading
    from types import SimpleNamespace

    from hpnlab.node.programs import elephant

    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window, never read: it fills
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    c.connect(ls.getsockname())
    peer, _ = ls.accept()
    c.setblocking(False)
    f = elephant.Flow("127.0.0.1", 0, elephant.Peer("127.0.0.1", 0))
    f.sock = c
    stop = SimpleNamespace(flag=False)
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(elephant._push(f, memoryview(b"\0" * elephant.CHUNK), stop)),
                         daemon=True)
    try:
        t.start()
        t.join(0.5)
        assert t.is_alive(), "the chunk fitted: the test did not fill the socket"
        stop.flag = True
        t.join(10)
        assert not t.is_alive(), "the sender kept waiting for room after its stop"
        assert got == [False] and 0 < f.sent < elephant.CHUNK  # what was queued counts, the rest was not sent
    finally:
        for s_ in (c, peer, ls):
            s_.close()


def test_linkstats_parses_a_root_qdisc_message():
    from hpnlab.node import linkstats

    def attr(t, v):
        return struct.pack("HH", 4 + len(v), t) + v + b"\0" * (-len(v) % 4)

    stats2 = attr(linkstats.TCA_STATS_BASIC, struct.pack("QI", 123456, 789)) + \
        attr(linkstats.TCA_STATS_QUEUE, struct.pack("IIIII", 3, 4500, 7, 0, 9))
    msg = linkstats.TCMSG.pack(0, 5, 0x10000, linkstats.TC_H_ROOT, 1) + attr(linkstats.TCA_KIND, b"tbf\0") + \
        attr(linkstats.TCA_STATS2 | 0x8000, stats2)
    idx, st = linkstats.parse_qdisc(msg)
    assert idx == 5 and st == {"kind": "tbf", "bytes": 123456, "packets": 789, "drops": 7, "backlog": 4500, "qlen": 3,
                               "queue": None}  # a root, not a qos queue's leaf (tests/test_qos.py parses those)
    child = linkstats.TCMSG.pack(0, 5, 0x100000, 0x10001, 1)
    assert linkstats.parse_qdisc(child) is None  # only root qdiscs are a port's queue


def test_linkstats_samples_this_namespace(tmp_path):
    r = subprocess.run([sys.executable, "-m", "hpnlab.node.linkstats", "--ifaces", "lo", "--interval", "0.05",
                        "--duration", "0.3", "--out", str(tmp_path / "s.json")], timeout=20)
    assert r.returncode == 0
    s = json.loads((tmp_path / "s.json").read_text())
    assert len(s["t"]) >= 3 and len(s["ifaces"]["lo"]["bytes"]) == len(s["t"])


# --- the all-reduce's placement disjoint (HPN's host-side selection for one peer's connections) --------------
def _edge_rows(src: str, dst: str, sports, port_of, agg_of) -> list[dict]:
    return [{"src": src, "dst": dst, "sport": s, "port": port_of(s), "tor": "?", "agg": agg_of(s), "dst_tor": "?"}
            for s in sports]


def test_spread_takes_both_ports_first_then_distinct_aggs_even_when_the_hash_favours_one_port():
    # 20 of 24 probed ports hash onto r0p0: random sports would often put every connection on one plane
    rows = _edge_rows("s1h1", "s0h0", range(100, 124), lambda s: "r0p0" if s < 120 else "r0p1", lambda s: f"agg{s % 3}")
    for seed in range(20):
        got = balance.spread(rows, 8, random.Random(seed))
        ports = [r["port"] for r in got]
        assert len({r["sport"] for r in got}) == 8
        assert ports.count("r0p1") == 4 and ports.count("r0p0") == 4, ports  # r0p1 has only 4: all of them
        on0 = [r["agg"] for r in got if r["port"] == "r0p0"]
        assert len(set(on0)) == 3, on0  # 4 connections on 3 aggs: every agg used before one is used twice


def test_spread_uses_unanswered_hops_only_by_their_first_hop_and_refuses_too_small_a_pool():
    rows = _edge_rows("s0h0", "s0h1", range(10), lambda s: ["r0p0", "r0p1", ""][s % 3], lambda s: "?")
    got = balance.spread(rows, 4, random.Random(1))
    assert sorted(r["port"] for r in got) == ["r0p0", "r0p0", "r0p1", "r0p1"]  # a row without its port is never used
    with pytest.raises(ValueError, match="7 answered source ports from s0h0 to s0h1; need 8"):
        balance.spread(rows, 8, random.Random(1))


def test_allreduce_placement_disjoint_binds_each_ranks_connections_to_ports_on_both_planes(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from hpnlab.traffic import workloads
    from hpnlab.traffic.run import experiment, nodetools
    from hpnlab.traffic.workloads import allreduce

    exp = experiment.load(experiment.find("link-failure"), ["dual-tor"], 1, None)
    plan = exp.plans[0]
    plan.workload = plan.workload.model_copy(update={"placement": "disjoint", "connections": 8})
    asked = []

    def fake_map(rt, cfgs, src, dsts, rail, sports, dport, proto):
        asked.append((src, tuple(dsts), dport, proto, len(sports)))
        ports = cfgs[src].nic(rail).ports
        return _edge_rows(src, dsts[0], sports, lambda s: ports[0] if s % 5 else ports[1], lambda s: f"agg{s % 2}")

    monkeypatch.setattr(nodetools, "path_map", fake_map)
    kind = workloads.get("allreduce")
    got = kind.prepare_variant(SimpleNamespace(runtime=None, cfgs=plan.cfgs), plan, tmp_path, lambda s: None)
    ring = plan.ring()
    assert sorted(a[0] for a in asked) == sorted(ring)  # one probe per ring edge, to the next rank
    assert {a[2:] for a in asked} == {(allreduce.RING_PORT, "tcp", 32)}  # the ring's port: the hash sees it
    procs = kind.launch(plan, tmp_path, 100.0, 5.0)
    for p in procs:
        sports = [int(s) for s in p["argv"][p["argv"].index("--sports") + 1].split(",")]
        placed = got["placement"]["0"][p["node"]]
        assert [x["sport"] for x in placed] == sports and len(sports) == 8
        assert sorted(x["port"] for x in placed).count(plan.cfgs[p["node"]].nic(0).ports[1]) == 4
    assert json.loads((tmp_path / "pathmap.json").read_text())  # the probed map is kept beside the reports
    plan.workload = plan.workload.model_copy(update={"placement": "hash"})
    plan.sports = {}
    assert kind.prepare_variant(None, plan, tmp_path, lambda s: None) == {}
    assert all("--sports" not in p["argv"] for p in kind.launch(plan, tmp_path, 100.0, 5.0))

"""The live view's model without a lab: link and node states from what the CLI reads, the events between two
snapshots, the agents' events, and the experiment's live lines (the node tools' counts, the runner's file
and the server's reader)."""

from __future__ import annotations

import json
import time

from hpnlab.lifecycle import fabricstate as fs
from hpnlab.node.reports import Live
from hpnlab.traffic.run import live
from hpnlab.watch import node_delta

A = fs.LinkInfo("s0h0:r0p0|s0r0a:h0p0", (("s0h0", "r0p0"), ("s0r0a", "h0p0")), "access", False)
U = fs.LinkInfo("s0r0a:agg0-0|agg0-0:s0r0a", (("s0r0a", "agg0-0"), ("agg0-0", "s0r0a")), "uplink", True)
UP = {"s0h0": {"r0p0": True}, "s0r0a": {"h0p0": True, "agg0-0": True}, "agg0-0": {"s0r0a": True}}


def carrier(**down) -> dict:
    c = json.loads(json.dumps(UP))
    for node, iface in down.items():
        c[node][iface] = False
    return c


def test_a_link_is_down_when_either_end_has_no_carrier():
    st = fs.link_states([A, U], carrier(s0r0a="h0p0"), [], {})
    assert st[A.id]["state"] == "down" and "s0r0a:h0p0" in st[A.id]["detail"]
    assert st[U.id]["state"] == "shaped"  # the spec gives it a rate; up otherwise
    assert fs.link_states([A], {}, [], {})[A.id]["state"] == "down"  # an end not found is not up


def test_faults_and_impairments_mark_the_link_they_act_on():
    one_way = [{"kind": "one-way", "node": "s0r0a", "iface": "h0p0"}]
    assert fs.link_states([A, U], UP, one_way, {})[A.id] == {"state": "faulted", "detail": "one-way s0r0a:h0p0"}
    st = fs.link_states([A, U], UP, [], {"agg0-0:s0r0a": {"loss_pct": 1.0}})
    assert st[U.id]["state"] == "impaired" and "loss_pct=1" in st[U.id]["detail"]
    assert st[A.id]["state"] == "up"
    # a link-down is down, and says which fault took it there
    st = fs.link_states([A], carrier(s0h0="r0p0"), [{"kind": "link-down", "node": "s0h0", "iface": "r0p0"}], {})
    assert st[A.id]["state"] == "down" and "link-down s0h0:r0p0" in st[A.id]["detail"]
    # several interfaces in one fault (single-ToR's one cable): each end is marked
    ends, nodes = fs.fault_ends([{"kind": "link-down", "node": "s0h0", "iface": "r0p0,r0p1"},
                                 {"kind": "power-off", "node": "agg0-0"}])
    assert set(ends) == {("s0h0", "r0p0"), ("s0h0", "r0p1")} and nodes == {"agg0-0": ["power-off agg0-0"]}


def test_a_node_is_healthy_only_with_every_count_full_and_no_fault():
    row = {"role": "tor", "frr": "3/3 daemons", "bgp": "2/2 sessions established", "ok": True,
           "_counts": {"frr": [3, 3], "bgp": [2, 2], "lacp": [2, 2]}, "_events": [[1.0, "x"]]}
    v = fs.node_view(row, (2, 2), [])
    assert v["ok"] and v["bfd"] == "2/2 sessions up" and "_events" not in v and "_counts" not in v
    assert not fs.node_view(row, (1, 2), [])["ok"]  # a BFD session down
    assert not fs.node_view(row, (2, 2), ["hang s0r0a"])["ok"]
    assert not fs.node_view({**row, "ok": False}, None, [])["ok"]


def snap(t: float, links: dict, nodes: dict, faults=(), impairments=None) -> dict:
    return {"t": t, "running": True, "links": links, "nodes": nodes, "faults": list(faults),
            "impairments": impairments or {}}


def test_diff_says_what_changed_and_whether_it_went_bad_or_came_back():
    n_ok = {"role": "tor", "lacp": "2/2 ports C/D", "counts": {"lacp": [2, 2]}, "ok": True}
    n_bad = {"role": "tor", "lacp": "1/2 ports C/D", "counts": {"lacp": [1, 2]}, "ok": False}
    a = snap(1.0, {A.id: {"state": "up", "detail": ""}}, {"s0r0a": n_ok})
    b = snap(2.0, {A.id: {"state": "down", "detail": "no carrier"}}, {"s0r0a": n_bad},
             faults=["link-down s0h0:r0p0"])
    assert fs.diff(None, a) == []
    assert fs.diff(a, a) == []
    ev = fs.diff(a, b)
    by = {e["kind"]: e for e in ev}
    assert by["link"]["severity"] == "bad" and "up -> down" in by["link"]["what"] and by["link"]["t"] == 2.0
    assert by["node"]["severity"] == "bad" and "s0r0a lacp: 2/2 ports C/D -> 1/2 ports C/D" == by["node"]["what"]
    assert by["fault"]["what"] == "fault applied: link-down s0h0:r0p0"
    back = {e["kind"]: e for e in fs.diff(b, a)}
    assert back["link"]["severity"] == "good" and back["node"]["severity"] == "good"
    assert back["fault"]["what"] == "fault reverted: link-down s0h0:r0p0"
    imp = fs.diff(a, snap(3.0, a["links"], a["nodes"], impairments={"s0r0a:h0p0": {"rate_kbit": 5000}}))
    assert imp == [{"t": 3.0, "kind": "impair", "severity": "bad", "what": "impairment s0r0a:h0p0: rate_kbit=5000"}]
    gone = fs.diff(a, {**snap(4.0, {}, {}), "running": False})
    assert [e["what"] for e in gone] == ["lab is gone (taken down)"]


def test_agent_events_are_news_only_after_the_first_read():
    seen: dict = {}
    rows = {"s0r0a": {"_events": [[10.0, "h0p0: carrier up"]]}}
    assert fs.agent_events(rows, seen) == [] and seen == {"s0r0a": 10.0}
    rows["s0r0a"]["_events"].append([11.5, "h0p0: carrier down"])
    assert [e["what"] for e in fs.agent_events(rows, seen)] == ["s0r0a: h0p0: carrier down"]
    assert fs.agent_events(rows, seen) == []


def test_node_delta_sends_only_what_changed():
    a = {"links": {"x": {"state": "up"}, "y": {"state": "up"}}}
    b = {"links": {"x": {"state": "up"}, "y": {"state": "down"}}}
    assert node_delta(a, b, "links") == {"y": {"state": "down"}}
    assert node_delta(None, b, "links") == b["links"]


def test_a_tool_writes_its_count_at_most_once_a_second(tmp_path):
    out = str(tmp_path / "probe-0.rx.json")
    lv = Live(out)
    lv.tick(5)
    assert live.read_count(tmp_path / "probe-0.rx.json.live") == 5
    lv.tick(9)  # within the second: not written
    assert live.read_count(tmp_path / "probe-0.rx.json.live") == 5
    lv.next_at = 0.0
    lv.tick(9)
    assert live.read_count(tmp_path / "probe-0.rx.json.live") == 9
    Live("-").tick(3)  # a report on standard output: no file anywhere
    assert live.read_count(tmp_path / "nothing.live") is None


def test_the_runner_lines_reach_the_reader(tmp_path):
    run_dir = tmp_path / "rep1"
    run_dir.mkdir()
    procs = [{"role": "receiver", "probe": "main", "out": str(run_dir / "probe-0.rx.json")},
             {"role": "sender", "probe": "main", "out": str(run_dir / "probe-0.tx.json")},
             {"role": "allreduce", "out": str(run_dir / "rank0.json")},
             {"role": "allreduce", "out": str(run_dir / "rank1.json")}]
    timeline = [{"label": "link-down s0h0:r0p0", "applied": 100.0, "reverted": None}]
    pub = live.Publisher(tmp_path, run_dir, "base", "base 1/1", 99.0, 10.0, [{"name": "main", "pps": 500.0}],
                         procs, timeline)
    tail = live.Tail(tmp_path)
    assert tail.read() == []
    (run_dir / "probe-0.rx.json.live").write_text(json.dumps({"t": time.time(), "count": 250}))
    (run_dir / "probe-0.tx.json.live").write_text(json.dumps({"t": time.time(), "count": 300}))
    (run_dir / "rank0.json.live").write_text(json.dumps({"t": time.time(), "count": 7}))
    (run_dir / "rank1.json.live").write_text(json.dumps({"t": time.time(), "count": 6}))
    pub.tick()
    pub.tick()  # within the second: nothing more
    (ln,) = tail.read()
    assert ln["streams"] == {"main": {"received": 250, "sent": 300, "pps": 500.0}} and ln["iterations"] == 6
    assert ln["faults"] == [{"label": "link-down s0h0:r0p0", "applied": 100.0, "reverted": None}]
    assert ln["variant"] == "base" and ln["t0"] == 99.0 and not ln["done"]
    timeline[0]["reverted"] = 102.0  # the runner's record, updated in place by revert_fault
    pub.close()
    (last,) = tail.read()
    assert last["done"] and last["faults"][0]["reverted"] == 102.0
    (tmp_path / live.FILE).unlink()  # a new lab's file: read from its start
    pub.tick(done=True)
    assert len(tail.read()) == 1


def test_bad_bind_and_port_are_one_line_naming_the_flag():
    import socket

    import pytest

    from hpnlab.errors import SpecError
    from hpnlab.watch import check_bind

    with pytest.raises(SpecError, match="^--port: 70000 is not a port"):
        check_bind("127.0.0.1", 70000)
    with pytest.raises(SpecError, match="^--bind: 'no.such.host.invalid' is not an address"):
        check_bind("no.such.host.invalid", 8765)
    with pytest.raises(SpecError, match="^--bind: 192.0.2.1 is not an address of this machine"):
        check_bind("192.0.2.1", 8765)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        with pytest.raises(SpecError, match=f"^--port {s.getsockname()[1]} on 127.0.0.1: Address already in use"):
            check_bind("127.0.0.1", s.getsockname()[1])
    finally:
        s.close()
    check_bind("127.0.0.1", 0)  # any free port


def test_the_page_ships_in_the_package_with_every_placeholder():
    from hpnlab.watch import page_file

    html = page_file("watch.html")
    for key in ("{{svg}}", "{{js}}", "{{css}}", "{{uplot_js}}", "{{uplot_css}}", "{{info}}", "{{title}}"):
        assert key in html
    assert "EventSource" in page_file("watch.js") and "line.link" in page_file("watch.css")


def test_a_fault_makes_only_its_node_and_peers_asked():
    from types import SimpleNamespace

    from hpnlab.model.topology import End, Link

    links = [Link(End("s0h0", "r0p0", ""), End("s0r0a", "h0p0", ""), "access"),
             Link(End("s0r0a", "agg0-0", ""), End("agg0-0", "s0r0a", ""), "uplink"),
             Link(End("s0r0a", "agg0-1", ""), End("agg0-1", "s0r0a", ""), "uplink"),
             Link(End("s1r0a", "agg0-0", ""), End("agg0-0", "s1r0a", ""), "uplink")]
    p = fs.Poller.__new__(fs.Poller)
    cfgs = {n: SimpleNamespace(iface=lambda i: None) for n in ("s0h0", "s0r0a", "agg0-0", "agg0-1", "s1r0a")}
    p.links = fs.links_of(SimpleNamespace(links=links), cfgs)
    none = {"faults": [], "impairments": {}}
    one_way = {"faults": [{"kind": "one-way", "node": "s0r0a", "iface": "agg0-0"}], "impairments": {}}
    assert p.touched(none, one_way) == {"s0r0a", "agg0-0"}
    assert p.touched(one_way, none) == {"s0r0a", "agg0-0"}  # its revert too
    assert p.touched(one_way, one_way) == set()
    hang = {"faults": [{"kind": "hang", "node": "s0r0a", "iface": None}], "impairments": {}}
    assert p.touched(none, hang) == {"s0r0a", "s0h0", "agg0-0", "agg0-1"}
    loss = {"faults": [], "impairments": {"agg0-0:s1r0a": {"loss_pct": 1.0}}}
    assert p.touched(none, loss) == {"agg0-0", "s1r0a"}

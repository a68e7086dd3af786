"""The black-box prober's root-free cores: probe-path selection from a path map (every directed access
and fabric link on >= 2 probed paths) and tomography (per-link loss bounds, the suspect and its
confidence), on a synthetic path map of the default lab's rail 0 built from its topology."""

from __future__ import annotations

import itertools
import random

import pytest

from hpnlab.instrument import probeplan, tomography
from hpnlab.instrument.tomography import PathStat
from hpnlab.traffic.run import experiment
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def cfgs():
    return experiment.load(ROOT / "experiments" / "link-failure.yml").plans[0].cfgs


def _rows(cfgs, rails=(0, 1), sports: int = 16, seed: int = 1, cross_rail: bool = True) -> list[dict]:
    """A path map as the hash would give it: per NIC pair through the aggs (another segment or another
    rail) and source port, a random port (ToR), agg of that ToR's plane, and the far ToR of that plane."""
    rng = random.Random(seed)
    hosts = sorted(n for n, c in cfgs.items() if c.role == "host")
    seg = {h: cfgs[cfgs[h].nic(0).tors[0]].segment for h in hosts}
    rows = []
    for (s, rs), (d, rd) in itertools.permutations([(h, r) for h in hosts for r in rails], 2):
        if (seg[s] == seg[d] and rs == rd) or (rs != rd and not cross_rail) or s == d:
            continue
        for sp in range(20000, 20000 + sports):
            tor = rng.choice(cfgs[s].nic(rs).tors)
            agg = rng.choice([i.peer for i in cfgs[tor].interfaces if i.kind == "uplink"])
            far = next(t for t in cfgs[d].nic(rd).tors if cfgs[t].plane == cfgs[tor].plane)
            rows.append({"src": s, "dst": d, "sport": sp, "port": "p", "tor": tor, "agg": agg, "dst_tor": far})
    return rows


def test_choice_covers_every_link_twice_with_few_paths(cfgs):
    rows = _rows(cfgs)
    want = probeplan.fabric_links(cfgs)
    chosen, have = probeplan.choose(rows, 2, want)
    assert probeplan.short(have) == [] and len(want) == 64  # 16 access + 16 uplinks, both ways
    assert all(n >= 2 for n in have.values()) and probeplan.alike(chosen, want) == []
    assert len(chosen) < len(rows) / 10, len(chosen)  # far fewer than the map's source ports


def _switch_rows(cfgs, rails=(0, 1)) -> list[dict]:
    """Paths to and from the aggs: each host NIC through each of its ToRs to that ToR's aggs, and back."""
    rows, sp = [], 30000
    for h in sorted(n for n, c in cfgs.items() if c.role == "host"):
        for r in rails:
            for t in cfgs[h].nic(r).tors:
                for i in cfgs[t].interfaces:
                    if i.kind == "uplink":
                        sp += 1
                        rows += [{"src": h, "dst": i.peer, "sport": sp, "hops": [h, t, i.peer]},
                                 {"src": i.peer, "dst": h, "sport": sp, "hops": [i.peer, t, h]}]
    return rows


@pytest.mark.parametrize("to_aggs", [True, False], ids=["to-and-from-aggs", "from-aggs-only"])
def test_paths_to_and_from_the_aggs_tell_uplink_from_downlink(cfgs, to_aggs):
    """The default lab's hosts have no route to the aggs' loopbacks: the aggs' paths down suffice."""
    want = probeplan.fabric_links(cfgs)
    sw = [r for r in _switch_rows(cfgs) if to_aggs or cfgs[r["src"]].role == "agg"]
    chosen, have = probeplan.choose(_rows(cfgs, cross_rail=False) + sw, 2, want)
    assert probeplan.short(have) == [] and probeplan.alike(chosen, want) == []
    assert any(r.get("hops") for r in chosen)


def test_one_rail_of_two_segments_cannot_tell_uplink_from_downlink(cfgs):
    """Within a rail, every path up s0r0a>agg0-0 comes down agg0-0>s1r0a: the choice says so."""
    chosen, have = probeplan.choose(_rows(cfgs, rails=(0,), cross_rail=False), 2, probeplan.fabric_links(cfgs, [0]))
    assert ["agg0-0>s1r0a", "s0r0a>agg0-0"] in probeplan.alike(chosen, list(have))


def test_choice_tells_every_two_links_apart_by_two_paths():
    """A link whose every path also crosses another is told from it only by the other's remaining paths;
    one such path is too few (the plan that let a CI run confirm an access link for its uplink's loss):
    the choice adds paths until every two links sharing a path differ in ``apart`` of them."""
    up, acc = "t>a", "t2>h"  # the access link's two paths both cross the uplink, which has one more
    rows = [{"src": "h0", "dst": "h", "sport": 1, "hops": ["h0", "t", "a", "t2", "h"]},
            {"src": "h1", "dst": "h", "sport": 2, "hops": ["h1", "t", "a", "t2", "h"]},
            {"src": "h0", "dst": "a", "sport": 3, "hops": ["h0", "t", "a"]},
            {"src": "a", "dst": "h", "sport": 4, "hops": ["a", "t2", "h"]},
            {"src": "h1", "dst": "a", "sport": 5, "hops": ["h1", "t", "a"]},
            {"src": "a", "dst": "h", "sport": 6, "hops": ["a", "t2", "h"]}]
    links = [up, acc]
    one, _ = probeplan.choose(rows, 2, links, apart=1)
    assert probeplan.close(one, links, 2) == [(acc, up)]  # told apart by one path only
    two, _ = probeplan.choose(rows, 2, links, apart=2)
    assert probeplan.close(two, links, 2) == [] and len(two) > len(one)
    # and a pair no candidate can split is reported, not looped on
    assert probeplan.close(rows[:2], links, 2) == [(acc, up)]
    assert probeplan.choose(rows[:2], 2, links, apart=2)[0] == rows[:2]


def test_a_fault_starting_mid_window_is_confirmed_on_its_own_link(cfgs):
    """1 % loss starting on a link, judged window by window as the prober does (hpnlab.instrument.probesim):
    with the paths apart by 2 and the margin, the first link confirmed is the faulty one in every simulated
    fault; with the old rules (apart 1, no margin) some fault confirms another link first, so this test
    can tell the two apart. Victims: links the old plan told apart from another by one path only."""
    from hpnlab.instrument import probesim
    from hpnlab.traffic.run.prober import DEFAULTS

    rows, want = _rows(cfgs) + _switch_rows(cfgs), probeplan.fabric_links(cfgs)
    old, _ = probeplan.choose(rows, 2, want, apart=1)
    new, _ = probeplan.choose(rows, 2, want, apart=DEFAULTS["apart"])
    victims = sorted({lk for pair in probeplan.close(old, want, 2) for lk in pair})[:6]
    assert victims, "the old plan has no close pair here: the test would not tell the rules apart"
    now = probesim.sweep(new, victims, 40, DEFAULTS)
    assert now["wrong"] == 0 and now["unconfirmed"] == 0 and now["right"] == now["faults"] == 240, now
    before = probesim.sweep(old, victims, 40, {**DEFAULTS, "min_margin": float("-inf")})
    print("old rules:", before["wrong"], "wrong of", before["faults"], before["wrong_pairs"])
    assert before["wrong"] > 0, before


def test_choice_reports_links_no_candidate_crosses(cfgs):
    rows = [r for r in _rows(cfgs) if r["agg"] != "agg0-1"]
    chosen, have = probeplan.choose(rows, 2, probeplan.fabric_links(cfgs))
    assert "s0r0a>agg0-1" in probeplan.short(have) and have["s0r0a>agg0-1"] == 0


def _stats(chosen, bad: dict[str, float], n: int = 1000, seed: int = 2) -> list[PathStat]:
    rng = random.Random(seed)
    out = []
    for r in chosen:
        links = probeplan.links_of(r)
        ok = 1.0
        for lk in links:
            ok *= 1 - bad.get(lk, 0.0)
        out.append(PathStat(links, n, sum(rng.random() > ok for _ in range(n))))
    return out


@pytest.mark.parametrize("victim", ["s0r0a>agg0-0", "agg1-1>s1r0b", "s0h1>s0r0b", "s1r0a>s1h0"])
def test_one_lossy_link_is_named_alone(cfgs, victim):
    chosen, _ = probeplan.choose(_rows(cfgs), 2, probeplan.fabric_links(cfgs))
    sus = tomography.suspects(_stats(chosen, {victim: 0.01}))
    assert [s["link"] for s in sus] == [victim], sus
    assert sus[0]["confidence"] > 0.9 and 0.003 < sus[0]["loss"] < 0.03


def test_fault_free_names_nothing_and_two_faults_name_both(cfgs):
    chosen, _ = probeplan.choose(_rows(cfgs), 2, probeplan.fabric_links(cfgs))
    assert tomography.suspects(_stats(chosen, {})) == []
    sus = tomography.suspects(_stats(chosen, {"s0r0a>agg0-0": 0.05, "agg1-0>s1r0b": 0.05}))
    assert {s["link"] for s in sus} == {"s0r0a>agg0-0", "agg1-0>s1r0b"}


def test_a_link_cleared_by_one_clean_path():
    a = PathStat(["x>y", "y>z"], 1000, 50)
    b = PathStat(["x>y", "y>w"], 1000, 0)
    c = PathStat(["q>y", "y>z"], 1000, 48)
    bounds = tomography.link_bounds([a, b, c])
    assert bounds["x>y"]["loss"] == 0 and bounds["y>z"]["loss"] == 0.048
    assert [s["link"] for s in tomography.suspects([a, b, c])] == ["y>z"]


def test_background_loss_lowers_the_confidence():
    p = [PathStat(["a>b"], 1000, 3), PathStat(["a>b", "b>c"], 1000, 4)]
    quiet = tomography.suspects(p, background=1e-5)[0]["confidence"]
    noisy = tomography.suspects(p, background=3e-3)[0]["confidence"]
    assert quiet > 0.99 and noisy < 0.7  # 7 lost of 2000 where background alone gives 6 on average


def test_binomial_tail():
    assert tomography.binom_tail(10, 0.5, 0) == 1.0
    assert abs(tomography.binom_tail(10, 0.5, 10) - 0.5 ** 10) < 1e-12
    assert abs(tomography.binom_tail(1000, 0.01, 10) - 0.5421) < 0.01


# --- isolation guards ------------------------------------------------------------------------------------------
def test_isolation_guards(cfgs):
    from hpnlab.traffic.run.isolation import guard

    def g(lk, out=(), recent=(), n=1):
        return guard(cfgs, lk, set(out), list(recent), 100.0, n, 60.0)

    assert g("s0r0a>agg0-0") is None and g("agg0-0>s0r0a") is None and g("s0h0>s0r0a") is None
    assert "no other uplink in service" in g("s0r0a>agg0-0", out=[("s0r0a", "agg0-1")])
    assert "no other ToR port in service" in g("s0r0a>s0h0", out=[("s0r0b", "h0p1")])
    assert "1 isolation(s) in the last 60 s" in g("s0r0a>agg0-0", recent=[90.0])
    assert g("s0r0a>agg0-0", recent=[10.0]) is None  # older than the window
    assert g("s0r0a>agg0-0", recent=[90.0], n=2) is None
    assert "already out of service" in g("agg0-0>s0r0a", out=[("s0r0a", "agg0-0")], n=5)
    assert "only access and ToR-agg links" in g("agg0-0>agg0-1")


def test_isolation_settings_fail_with_one_line():
    from hpnlab.errors import SpecError
    from hpnlab.traffic.run.isolation import Isolator

    for kw, msg in [({"acton": 1}, "isolation.acton: unknown setting"), ({"action": "cut"}, "isolation.action"),
                    ({"hold_s": 0}, "hold_s > 0")]:
        with pytest.raises(SpecError) as e:
            Isolator(None, None, **kw)
        assert msg in str(e.value) and "\n" not in str(e.value)


def test_prober_settings_fail_with_one_line(tmp_path):
    from hpnlab.errors import SpecError
    from hpnlab.traffic.run.prober import Prober

    for kw, msg in [({"rat": 1}, "prober.rat: unknown setting"), ({"rate": 0}, "prober.rate")]:
        with pytest.raises(SpecError) as e:
            Prober(None, {}, tmp_path, **kw)
        assert msg in str(e.value) and "\n" not in str(e.value)


def _lines(tmp_path, p, sent: dict, recv_of, t_rx=lambda dst: 1010.0) -> None:
    """Node-program lines written by hand: every path's sent counts from one sender ("a"), and each
    receiver's counts in its own file with its last line at ``t_rx(dst)``."""
    import json

    (tmp_path / "prober" / "a.jsonl").write_text(json.dumps({"t": 1010.0, "sent": sent, "recv": {}, "cpu_s": 1.0}) + "\n")
    p.procs = {"a": None}
    for dst in sorted({r["dst"] for r in p.rows}):
        recv = {str(r["id"]): recv_of(r) for r in p.rows if r["dst"] == dst}
        (tmp_path / "prober" / f"{dst}.jsonl").write_text(
            json.dumps({"t": t_rx(dst), "sent": {}, "recv": recv, "cpu_s": 1.5}) + "\n")
        p.procs[dst] = None
    p._read()


def test_prober_judges_the_node_programs_lines(cfgs, tmp_path):
    """The controller's accounting, from node-program lines written by hand: per path, sent minus received
    in complete buckets; two judgements in a row confirm the suspect, timestamped."""
    from hpnlab.traffic.run.prober import Prober

    p = Prober(None, cfgs, tmp_path, rate=100, window_s=5, bucket_s=0.5, grace_s=1)
    chosen, p.coverage = probeplan.choose(_rows(cfgs), 2, probeplan.fabric_links(cfgs))
    p.rows = [{**r, "id": i} for i, r in enumerate(chosen)]
    victim = "s0r0a>agg0-0"
    sent = {str(r["id"]): {str(b): 50 for b in range(2000, 2010)} for r in p.rows}
    _lines(tmp_path, p, sent, lambda r: {str(b): 50 - (3 if victim in probeplan.links_of(r) and b % 3 == 0 else 0)
                                         for b in range(2000, 2010)})
    stats = p.window(now=1005.0 + 1.0)  # buckets 2000..2009 complete (bucket 0.5 s: t 1000..1005)
    assert sum(s.sent for s in stats) == 500 * len(p.rows)
    p.started = 1000.0
    p.judge(now=1006.0)
    p.judge(now=1006.5)
    assert [e["event"] for e in p.events] == ["suspected", "confirmed"] and p.events[1]["link"] == victim
    assert p.events[1]["node"] == "s0r0a" and p.events[1]["iface"] == "agg0-0" and p.events[1]["t"] == 1006.5
    # the link stays named: no new suspicion; a judgement naming nothing, then the link again: a new one
    p.judge(now=1006.5)
    assert [e["event"] for e in p.events] == ["suspected", "confirmed"]
    p._counts.clear()
    p.judge(now=1007.0)
    p._offsets.clear()  # the files written again from the start
    _lines(tmp_path, p, sent, lambda r: {str(b): 50 - (3 if victim in probeplan.links_of(r) and b % 3 == 0 else 0)
                                         for b in range(2000, 2010)})
    p.judge(now=1006.0)
    assert [e["event"] for e in p.events] == ["suspected", "confirmed", "suspected"], p.events


def test_a_receiver_that_reports_late_is_not_charged_with_loss(cfgs, tmp_path):
    """A receiver the machine did not run for a while has written its counts only up to some time: its
    paths' later buckets wait for it instead of counting every probe sent in them as lost (which named the
    access link into that receiver). What it has reported is judged as before."""
    from hpnlab.traffic.run.prober import IN_FLIGHT_S, Prober

    p = Prober(None, cfgs, tmp_path, rate=100, window_s=5, bucket_s=0.5, grace_s=1)
    chosen, p.coverage = probeplan.choose(_rows(cfgs), 2, probeplan.fabric_links(cfgs))
    p.rows = [{**r, "id": i} for i, r in enumerate(chosen)]
    late = next(r["dst"] for r in p.rows if r["dst"].startswith("s"))  # a host
    cut = 1002.5 + IN_FLIGHT_S  # it reported what arrived up to here: buckets 2000..2004 (t 1000..1002.5)
    sent = {str(r["id"]): {str(b): 50 for b in range(2000, 2010)} for r in p.rows}
    _lines(tmp_path, p, sent, lambda r: {str(b): 50 for b in range(2000, 2010 if r["dst"] != late else 2005)},
           t_rx=lambda dst: cut if dst == late else 1010.0)
    stats = {r["id"]: s for r, s in zip(p.rows, p.window(now=1006.0))}
    assert all(s.lost == 0 for s in stats.values()), [r for r in p.rows if stats[r["id"]].lost]
    assert {stats[r["id"]].sent for r in p.rows if r["dst"] == late} == {250}  # its reported half, judged
    assert {stats[r["id"]].sent for r in p.rows if r["dst"] != late} == {500}
    p.judge(now=1006.0)
    p.judge(now=1006.5)
    assert p.events == [], p.events


def test_node_prober_on_loopback_counts_what_it_sends_and_receives(tmp_path):
    """The node program alone, root-free on 127.0.0.1: two paths at 100/s for 1.5 s; every probe sent is
    counted received in its send-time bucket, and its CPU is reported."""
    import json
    import subprocess
    import sys

    paths = [{"id": 0, "src_ip": "127.0.0.1", "sport": 0, "dst_ip": "127.0.0.1"},
             {"id": 1, "src_ip": "127.0.0.1", "sport": 0, "dst_ip": "127.0.0.1"}]
    (tmp_path / "p.json").write_text(json.dumps(paths))
    out = tmp_path / "o.jsonl"
    port = 20000 + (abs(hash(str(tmp_path))) % 20000)
    subprocess.run([sys.executable, "-m", "hpnlab.node.programs.prober", "--paths", str(tmp_path / "p.json"), "--listen",
                    "127.0.0.1", "--port", str(port), "--rate", "100", "--out", str(out), "--duration", "1.5",
                    "--interval", "0.25"], check=True, timeout=30, cwd=ROOT)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    sent = {p: sum(n for ln in lines for n in ln["sent"].get(p, {}).values()) for p in ("0", "1")}
    got = {p: sum(n for ln in lines for n in ln["recv"].get(p, {}).values()) for p in ("0", "1")}
    assert 100 <= sent["0"] <= 160 and 100 <= sent["1"] <= 160, sent  # 150 each on time; a busy machine lags
    assert got["0"] + got["1"] >= sent["0"] + sent["1"] - 4, (sent, got)  # the last few may be in flight at exit
    assert lines[-1]["cpu_s"] > 0

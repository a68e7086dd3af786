"""The outage analysis (traffic/analysis/measure.py) against synthetic probe traces whose ground truth is known:
the regression cases of the defects it had (a fault charged with the next fault's loss, gaps after the
repair counted as convergence, flows silent only late in a fault counted as black-holed for the whole of
it, stalled repetitions hidden by median/max), each boundary of the definition in docs/results.md, and
hypothesis properties over random fault timelines."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from hpnlab.node import rtnl
from hpnlab.traffic.analysis import measure
from hpnlab.traffic.run import nodebytes
from hpnlab.traffic.output import report
from hpnlab.traffic.workloads.base import recovered_at

IV = 0.004  # 250 probe packets/s per flow


def trace(outages: list[tuple[float, float]], start: float = 0.0, end: float = 10.0, iv: float = IV,
          stream: str = "s", flow: int = 0) -> measure.Flow:
    """A flow sending every ``iv`` s from ``start`` to ``end`` whose packets sent inside any [a, b) outage
    are lost: the gaps a receiver would report (sender clock), built packet by packet."""
    n = int(round((end - start) / iv))
    times = [start + i * iv for i in range(n)]
    lost = [any(a <= t < b for a, b in outages) for t in times]
    gaps, i = [], 0
    while i < n:
        if not lost[i]:
            i += 1
            continue
        j = i
        while j < n and lost[j]:
            j += 1
        before = times[i - 1] if i > 0 else start - iv
        after = times[j] if j < n else end + iv  # a tail gap ends at the sender's end (flows_of's rule)
        gaps.append(measure.Gap(before, after, j - i, iv))
        i = j
    return measure.Flow(stream, flow, n, n - sum(lost), 0, 0, gaps)


# --- regressions: each failed on the analysis before this definition ------------------------------------------
def test_the_next_faults_outage_is_not_charged_to_the_previous_fault():
    """The issue's reproduction: a flow untouched by a fault at 1-2 s whose next fault (at 4 s) silences it
    from 3.998 s (its last packet through) to 7.001 s was reported 'converged 2999 ms, recovered NO'."""
    fl = measure.Flow("s", 0, 2500, 1750, 0, 0, [measure.Gap(3.998, 7.001, 750, IV)])
    first = measure.fault_metrics([fl], start=1.0, end=2.0, window_end=4.0)
    assert first["converged_gap_ms"] == 0.0 and first["longest_gap_ms"] == 0.0 and first["lost_packets"] == 0
    assert first["recovered"] is True and first["first_loss_s"] is None and first["flows_affected"] == 0
    second = measure.fault_metrics([fl], start=4.0, end=7.0, window_end=10.0)
    assert second["lost_packets"] == 750 and second["blackholed_flows"] == 1 and second["first_loss_s"] == 0.002


def test_a_gap_after_the_repair_is_not_convergence_and_is_measured_as_recovery():
    """tor-failure power-off: a 16 ms converged gap during the fault, then the repair's own black hole of
    ~2 s (the table said 'converged ~2000 ms')."""
    during = trace([(2.0, 2.016)], flow=0)
    post = trace([(6.2, 8.2)], flow=1)
    m = measure.fault_metrics([during, post], start=2.0, end=6.0, window_end=10.0)
    assert m["converged_gap_ms"] == 16.0
    assert m["after_repair_gap_ms"] == 2000.0 and m["recovery_after_repair_ms"] == 2200.0
    assert m["lost_after_repair"] == 500 and m["blackholed_flows"] == 0 and m["silent_at_repair_flows"] == 0
    assert m["recovered"] is False  # lost more than 1 s after the repair: the repair caused a second outage


def test_flows_silent_only_late_in_the_fault_are_not_black_holed_for_the_whole_fault():
    """tor-hang: flows delivered for the first 1.08 s of the fault, then nothing until the repair."""
    flows = [trace([(3.08, 6.0 + 0.01 * k)], flow=k) for k in range(4)]
    flows.append(trace([(2.0, 6.05)], flow=4))  # one silent from the fault's first effect to after the repair
    m = measure.fault_metrics(flows, start=2.0, end=6.0, window_end=10.0)
    assert m["blackholed_flows"] == 1 and m["silent_at_repair_flows"] == 5
    assert m["first_loss_s"] == 0.0 and m["converged_gap_ms"] == 0.0
    # a fault on two ports applied one after the other (single-ToR's cable: the second 14 ms later, its flows
    # silent 40 ms in) silences them all with the fault
    both = [trace([(2.026, 6.03)], flow=0), trace([(2.04, 6.02)], flow=1)]
    assert measure.fault_metrics(both, 2.0, 6.0, 10.0)["blackholed_flows"] == 2


def _agg_run(pct: float, halt: float) -> dict:
    f = {"fault": "link-down s0h0:r0p0", "kind": "link-down", "at": 2, "until": 6, "recovered": True,
         "routes_first_ms": 1.0, "routes_last_ms": 130.0, "streams": {},
         **{m: 0 for m in report.METRICS}, "workload": {"throughput_pct": pct, "longest_halt_ms": halt}}
    return {"faults": [f], "probes": {}}


def test_a_stalled_repetition_shows_in_the_summary():
    """stacked-vs-nonstacked repetition 3 had the all-reduce at 0.2 % with a 4,993 ms halt; median/max
    printed 114/128 %."""
    runs = [_agg_run(114.0, 30.0), _agg_run(128.0, 25.0), _agg_run(0.2, 4993.0)]
    agg = report.aggregate(runs)
    assert agg[0]["workload"]["throughput_pct"] == {"n": 3, "min": 0.2, "median": 114.0, "max": 128.0}
    text = report.summary_table({"experiment": "x", "repetitions": 3, "duration": 11,
                                 "variants": {"clos": {"runs": runs, "faults": agg}}})
    assert "0.2/114/128" in text and "min/median/max" in text


def test_an_unrecovered_repetition_is_counted_not_hidden():
    runs = [_agg_run(100.0, 10.0) for _ in range(3)]
    runs[1]["faults"][0]["recovered"] = False
    agg = report.aggregate(runs)
    assert agg[0]["recovered"] is False and agg[0]["recovered_runs"] == 2
    text = report.summary_table({"experiment": "x", "repetitions": 3, "duration": 11,
                                 "variants": {"v": {"runs": runs, "faults": agg}}})
    assert "NO 1/3" in text


# --- boundaries of the definition ------------------------------------------------------------------------------
def test_a_gap_straddling_the_next_faults_start_belongs_to_the_fault_it_began_in():
    fl = trace([(3.5, 4.5)])  # began in fault 1's window (1-4 s), ran into fault 2's
    first = measure.fault_metrics([fl], 1.0, 2.0, 4.0)
    second = measure.fault_metrics([fl], 4.0, 5.0, 10.0)
    assert first["lost_packets"] == 250 and first["resumed"] is False and first["recovered"] is False
    assert second["lost_packets"] == 0 and second["flows_affected"] == 0
    # a packet sent just before a fault, lost on the wire when it struck, is that fault's
    edge = trace([(4.0 - 0.02, 4.3)])
    assert measure.fault_metrics([edge], 4.0, 5.0, 10.0)["lost_packets"] == 80
    assert measure.fault_metrics([edge], 1.0, 2.0, 4.0)["lost_packets"] == 0


def test_a_gap_beginning_after_the_repair_is_the_repaired_faults():
    fl = trace([(6.5, 6.7)])
    m = measure.fault_metrics([fl], 2.0, 6.0, 9.0)
    assert m["lost_packets"] == 50 and m["converged_gap_ms"] == 0.0 and m["after_repair_gap_ms"] == 200.0
    assert m["recovery_after_repair_ms"] == 700.0 and m["recovered"] is True  # nothing lost > 1 s after it
    assert m["lost_after_repair_1s"] == 0 and m["lost_after_repair"] == 50


def test_two_faults_one_second_apart_and_a_flow_hit_by_both():
    a = trace([(1.0, 1.12), (2.0, 2.2)], flow=0)  # hit by both, delivering again between them
    b = trace([(2.0, 2.3)], flow=1)  # hit by the second only
    f1 = measure.fault_metrics([a, b], 1.0, 1.5, 2.0)
    f2 = measure.fault_metrics([a, b], 2.0, 2.5, 9.0)
    assert (f1["flows_affected"], f1["converged_gap_ms"], f1["lost_packets"]) == (1, 120.0, 30)
    assert (f2["flows_affected"], f2["converged_gap_ms"], f2["lost_packets"]) == (2, 300.0, 125)
    assert f1["recovered"] and f2["recovered"]


def test_a_fault_never_repaired_converges_within_its_window():
    fl = [trace([(2.0, 2.1)], flow=0), trace([(2.0, 10.0)], flow=1)]
    m = measure.fault_metrics(fl, 2.0, None, 10.0)
    assert m["converged_gap_ms"] == 100.0 and m["blackholed_flows"] is None and m["resumed"] is False


def test_loss_before_the_first_fault_belongs_to_no_fault():
    fl = trace([(0.5, 0.6), (2.0, 2.1)])
    assert measure.unattributed_loss([fl], 2.0) == 25
    assert measure.fault_metrics([fl], 2.0, 3.0, 10.0)["lost_packets"] == 25


# --- the workload after the repair -----------------------------------------------------------------------------
def test_workload_recovery_is_the_time_until_it_runs_at_90_percent_again():
    rate = 40.0  # iterations/s
    before = [i / rate for i in range(1, int(6 * rate))]  # up to the repair at 6 s
    resumed = [8.4 + i / rate for i in range(int(3 * rate))]  # a 2.4 s halt after the repair
    r = recovered_at(before + resumed, rate, repair=6.0, window_end=12.0)
    assert r["recovered"] and r["recovery_ms"] == 2400.0 and r["halt_after_repair_ms"] == 2400.0 - 1000 / rate * 0
    steady = recovered_at(before + [6.0 + i / rate for i in range(1, int(6 * rate))], rate, 6.0, 12.0)
    assert steady["recovery_ms"] == 0.0
    dead = recovered_at(before, rate, 6.0, 12.0)
    assert dead["recovered"] is False and dead["recovery_ms"] == 6000.0 and dead["halt_after_repair_ms"] == 6000.0
    slow = recovered_at(before + [6.0 + i / (rate / 2) for i in range(1, 200)], rate, 6.0, 12.0)
    assert slow["recovered"] is False  # back, but at half speed
    late = recovered_at(before + [11.4 + i / rate for i in range(24)], rate, 6.0, 12.0)
    assert late["recovered"] and late["recovery_ms"] == 5400.0  # back 0.6 s before the window's end: judged on that
    last = recovered_at(before + [11.95 + i / rate for i in range(2)], rate, 6.0, 12.0)
    assert last["recovered"] is False  # 50 ms left: too little to judge a rate on


# --- properties ------------------------------------------------------------------------------------------------
@st.composite
def timelines(draw):
    """2-4 faults, each with a repair before the next; per flow outages of known kind in each window."""
    n = draw(st.integers(2, 4))
    faults, t = [], 1.0
    for _ in range(n):
        dur = draw(st.sampled_from([0.4, 1.0, 2.0]))
        rest = draw(st.sampled_from([0.6, 1.0, 2.5]))
        faults.append((t, t + dur, t + dur + rest))  # applied, repaired, next window starts
        t += dur + rest
    end = t + 1.0
    flows, truth = [], []
    for k in range(draw(st.integers(1, 6))):
        outs, kinds = [], []
        for i, (s, r, nxt) in enumerate(faults):
            kind = draw(st.sampled_from(["none", "converged", "blackhole", "late-silent", "after"]))
            d = draw(st.sampled_from([0.02, 0.1, 0.3]))
            if kind == "converged":
                outs.append((s, min(s + d, r - 0.05)))
            elif kind == "blackhole":
                outs.append((s, r + 0.01))
            elif kind == "late-silent":
                outs.append((s + (r - s) / 2, r + 0.01))
            elif kind == "after":
                outs.append((r + 0.1, r + 0.1 + min(d, nxt - r - 0.2)))
            kinds.append(kind)
        flows.append(trace(outs, end=end, flow=k))
        truth.append(kinds)
    return faults, end, flows, truth


@settings(max_examples=150, deadline=None)
@given(timelines())
def test_every_figure_matches_the_ground_truth(tl):
    faults, end, flows, truth = tl
    total = 0
    for i, (s, r, nxt) in enumerate(faults):
        window_end = faults[i + 1][0] if i + 1 < len(faults) else end
        m = measure.fault_metrics(flows, s, r, window_end)
        kinds = [t[i] for t in truth]
        assert m["flows_affected"] == sum(k != "none" for k in kinds)
        # black-holed: silent from the fault's first effect (the earliest loss it caused) until the repair; a
        # flow silenced halfway is that only where nothing was hit earlier
        first = min((0.0 if k != "late-silent" else 0.5) for k in kinds if k not in ("none", "after")) \
            if any(k not in ("none", "after") for k in kinds) else None
        assert m["blackholed_flows"] == sum(k in ("blackhole", "late-silent") and (0.0 if k == "blackhole" else 0.5) == first
                                            for k in kinds)
        assert m["silent_at_repair_flows"] == kinds.count("blackhole") + kinds.count("late-silent")
        conv = [g.ms for fl, k in zip(flows, kinds) if k == "converged"
                for g in fl.gaps if s - 0.01 <= g.first_lost < r]
        assert m["converged_gap_ms"] == round(max(conv, default=0.0), 1)
        assert (m["after_repair_gap_ms"] > 0) == ("after" in kinds)
        assert m["resumed"] and m["converged_gap_ms"] <= m["longest_gap_ms"]
        assert m["recovered"] == ("after" not in kinds or m["lost_after_repair_1s"] == 0)
        total += m["lost_packets"]
    # every lost packet is charged to exactly one fault
    assert total + measure.unattributed_loss(flows, faults[0][0]) == sum(fl.lost for fl in flows)


@settings(max_examples=100, deadline=None)
@given(timelines(), st.floats(0.0, 1.0))
def test_a_faults_figures_do_not_depend_on_other_windows(tl, where):
    """Adding an outage inside another fault's window leaves this fault's figures unchanged."""
    faults, end, flows, _truth = tl
    s, r, _nxt = faults[0]
    window_end = faults[1][0]
    before = measure.fault_metrics(flows, s, r, window_end)
    a = window_end + where * (end - window_end - 0.3)
    extra = trace([(a, a + 0.2)], end=end, flow=99)
    after = measure.fault_metrics(flows + [extra], s, r, window_end)
    assert {k: v for k, v in after.items() if k != "flows"} == {k: v for k, v in before.items() if k != "flows"}


# --- the load a failed agg leaves on its plane (traffic/run/nodebytes.py) ---------------------------------------------
def _readings(key: str, before: dict[str, float], during: dict[str, float]) -> list[dict]:
    """The four readings of one fault whose nodes sent ``before``/``during`` bytes/s, 1 s windows ending
    at 1.95 s and 6.95 s; each node read 2 ms after the one before it (a sweep over 60 aggs takes time)."""
    out, total = [], {n: 1_000_000 for n in before}
    for window, start, rates in (("before", 0.95, before), ("during", 5.95, during)):
        for edge in (0, 1):
            t = start + edge
            nodes = {}
            for k, n in enumerate(sorted(rates)):
                nodes[n] = [t + 0.002 * k, total[n] + (rates[n] if edge else 0)]
            if edge:
                total = {n: total[n] + rates[n] for n in rates}
            out.append({"fault": key, "window": window, "edge": edge, "nodes": nodes})
    return out


def test_the_load_a_failed_agg_leaves_is_shared_by_its_survivors():
    """Three aggs at 300 kB/s each; one fails and the two left carry 450 kB/s each: x1.5, the even split's
    3/2, each survivor's share 1/3 -> 1/2."""
    r = _readings("power-off agg0-0@2", {"agg0-0": 300e3, "agg0-1": 300e3, "agg0-2": 300e3},
                  {"agg0-0": 0.0, "agg0-1": 450e3, "agg0-2": 450e3})
    ld = nodebytes.load(r, "power-off agg0-0@2", "agg0-0", ["agg0-1", "agg0-2"])
    assert ld["node_before_Bps"] == 300000 and ld["node_during_Bps"] == 0 and ld["survivors"] == 2
    assert ld["survivor_before_Bps"] == 300000 and ld["survivor_during_Bps"] == 450000
    assert ld["survivor_ratio_pct"] == 150.0 == ld["even_ratio_pct"]
    assert ld["survivor_share_before_pct"] == 33.33 and ld["survivor_share_during_pct"] == 50.0
    # an uneven spread shows: one survivor takes it all
    r = _readings("k", {"a": 300e3, "b": 300e3, "c": 300e3}, {"a": 0.0, "b": 900e3, "c": 0.0})
    ld = nodebytes.load(r, "k", "a", ["b", "c"])
    assert ld["survivor_during_max_Bps"] == 900000 and ld["survivor_during_min_Bps"] == 0
    assert ld["survivor_ratio_pct"] == 150.0 and ld["survivor_share_during_pct"] == 50.0
    # no reading of a window (a lab that is not on this machine): no figure, not a zero
    assert nodebytes.load([x for x in r if x["window"] == "before"], "k", "a", ["b", "c"]) is None
    assert nodebytes.load(r, "another fault", "a", ["b", "c"]) is None


def test_an_aggs_peers_are_the_aggs_of_its_plane():
    from types import SimpleNamespace as N
    cfgs = {"agg0-0": N(role="agg", asn=65000), "agg0-1": N(role="agg", asn=65000),
            "agg1-0": N(role="agg", asn=65001), "s0r0a": N(role="tor", asn=65100), "s0h0": N(role="host", asn=None)}
    assert nodebytes.peers_of(cfgs, "agg0-0") == ["agg0-1"]
    assert nodebytes.peers_of(cfgs, "agg1-0") == []  # alone in its plane: no survivor to share with
    assert nodebytes.peers_of(cfgs, "s0r0a") == [] and nodebytes.peers_of(cfgs, "nope") == []
    assert nodebytes.windows(2.0, 7.0, 15.0) == {"before": (0.95, 1.95), "during": (5.95, 6.95)}
    assert nodebytes.windows(2.0, None, 15.0)["during"] == (13.95, 14.95)


def test_a_nodes_bytes_are_its_interfaces_tx_bytes_but_the_loopbacks():
    import struct

    def link(name: str, tx: int) -> tuple[int, bytes]:
        stats = struct.pack("=4Q", 1, 2, 3, tx) + bytes(8 * 19)
        return rtnl.RTM_NEWLINK, bytes(16) + rtnl.attr(rtnl.IFLA_IFNAME, name.encode() + b"\0") + \
            rtnl.attr(nodebytes.IFLA_STATS64, stats)

    assert nodebytes.tx_bytes([link("lo", 10**9), link("s0r0a", 1500), link("s1r0a", 64)]) == 1564


def test_the_load_goes_into_the_summary():
    runs = [_agg_run(100.0, 10.0) for _ in range(3)]
    for k, r in enumerate(runs):
        r["faults"][0]["load"] = {"node": "agg0-0", "survivors": 1, "node_before_Bps": 2000 + k, "node_during_Bps": 0,
                                  "survivor_before_Bps": 1000, "survivor_during_Bps": 2000 + 1000 * k,
                                  "survivor_ratio_pct": 200.0 + 100 * k, "even_ratio_pct": 200.0,
                                  "survivor_share_before_pct": 50.0, "survivor_share_during_pct": 100.0,
                                  "survivor_during_min_Bps": 2000,
                                  "survivor_during_max_Bps": 2000}
    agg = report.aggregate(runs)
    assert agg[0]["load"]["survivor_ratio_pct"] == {"n": 3, "min": 200.0, "median": 300.0, "max": 400.0}
    text = report.summary_table({"experiment": "x", "repetitions": 3, "duration": 11,
                                 "variants": {"clos": {"runs": runs, "faults": agg}}})
    flat = " ".join(text.split())  # summary.txt folds prose lines to fit a terminal
    assert "load clos / link-down s0h0:r0p0: agg0-0 2/2/2 -> 0/0/0 kB/s; per survivor (1/1/1) 1/1/1 -> 2/3/4 kB/s " \
           "= 200/300/400 % (even split 200/200/200 %); a survivor's share 50/50/50 -> 100/100/100 %" in flat


def test_a_dilated_variant_reads_its_durations_back_in_the_fabrics_time():
    """time_dilation k: each fault's durations also divided by k, and the summary says what that is true for."""
    runs = [_agg_run(100.0, 10.0) for _ in range(3)]
    for r, gap in zip(runs, (3000.0, 3300.0, 3600.0)):
        r["faults"][0]["converged_gap_ms"] = gap
    agg = report.aggregate(runs, dilation=10)
    ft = agg[0]["fabric_time"]
    assert ft["time_dilation"] == 10
    assert ft["converged_gap_ms"] == {"n": 3, "min": 300.0, "median": 330.0, "max": 360.0}
    assert ft["routes_last_ms"]["median"] == 13.0
    assert "fabric_time" not in report.aggregate(runs)[0]
    text = report.summary_table({"experiment": "x", "repetitions": 3, "duration": 11,
                                 "variants": {"v": {"runs": runs, "faults": agg}}})
    assert "converged gap 300/330/360 ms" in text and "not dilated" in text


def test_the_summary_fits_a_terminal_explains_every_column_and_names_a_black_hole():
    """summary.txt: no line past report.WIDTH, a one-line legend per column at its end, and a stream whose
    gaps all lasted until the repair reads 'no gap closed', not a converged gap of 0 ms."""
    from hpnlab.traffic import runner

    runs = [_agg_run(100.0, 10.0) for _ in range(3)]
    for r in runs:
        f = r["faults"][0]
        f["longest_gap_ms"], f["blackholed_flows"], f["converged_gap_ms"] = 4012.0, 30, 0
        f["streams"] = {name: {**{m: f[m] for m in report.METRICS}, "recovered": True} for name in
                        ("a-very-long-stream-name-upstream", "a-very-long-stream-name-downstream", "in-set", "far")}
    agg = report.aggregate(runs)
    text = runner.summary({"experiment": "x", "repetitions": 3, "duration": 11,
                           "variants": {"dual-tor": {"runs": runs, "faults": agg}}})
    lines = text.splitlines()
    assert max(map(len, lines)) <= report.WIDTH, [ln for ln in lines if len(ln) > report.WIDTH]
    legend = lines[lines.index("legend (docs/results.md says more):") + 1:]
    assert [ln.split(":")[0].strip() for ln in legend] == [c for c, _key in report.COLUMNS]
    converged = [ln for ln in lines if ln.startswith("converged ms ")]
    assert converged and all("no gap closed" in ln and " 0 " not in f"{ln} " for ln in converged), converged
    assert len(converged) == 2  # the streams that did not fit went on in a second table

"""The probes' reordering, from synthetic arrival traces (no root): what the receiver records per flow, the
share out of order and the reorder distance per stream, and their summary over repetitions."""

from __future__ import annotations

from hpnlab.node.programs.probe import FlowRx
from hpnlab.traffic.analysis import measure, reorder


def _receive(arrivals: list[int]) -> dict:
    """One flow's receiver record after the packets arrived in this order (send times are irrelevant here)."""
    fr = FlowRx()
    for k, seq in enumerate(arrivals):
        fr.add(seq, 10_000_000 * seq, 10_000_000 * k)  # 100 packets/s, as _flows sends them
    return {"src": "10.0.0.2", "flow": 0, "received": fr.received, "max_seq": fr.max_seq, "dups": fr.dups,
            "reordered": fr.reordered, "reorder_distances": sorted(fr.late.items()), "last_tx": fr.last_tx,
            "gaps": fr.final_gaps()}


def _flows(*records: dict, sent: int = 10, drop_distances: bool = False) -> list[measure.Flow]:
    rx = {"flows": [{**r, "flow": i} for i, r in enumerate(records)]}
    if drop_distances:  # a receiver's report from before the distances were recorded
        for f in rx["flows"]:
            del f["reorder_distances"]
    tx = {"src": "10.0.0.2", "rate_per_flow": 100.0, "sent": [sent] * len(records), "start": 0.0, "end": 0.1}
    return measure.flows_of("s", tx, rx)


def test_the_receiver_records_how_far_behind_each_late_packet_arrived():
    # two paths: 0 2 4 on a short one overtake 1 3 on a long one; 9 overtakes 5-8 by up to 4
    r = _receive([0, 2, 1, 4, 3, 9, 5, 6, 7, 8])
    assert r["reordered"] == 6 and r["received"] == 10
    assert dict(r["reorder_distances"]) == {1: 3, 2: 1, 3: 1, 4: 1}  # 1 and 3 by 1; 5 by 4, 6 by 3, 7 by 2, 8 by 1


def test_a_streams_share_out_of_order_and_reorder_distance():
    flows = _flows(_receive([0, 2, 1, 4, 3, 9, 5, 6, 7, 8]), _receive(list(range(10))))
    got = measure.reordering(flows)
    # 6 of the 20 received arrived late: 30 %; distances 1, 1, 4, 3, 2, 1: max 4, median (3rd of 6) 1, p99 4
    assert got["out_of_order_pct"] == 30.0
    assert got["distance_max"] == 4 and got["distance_median"] == 1 and got["distance_p99"] == 4


def test_in_order_streams_have_distance_zero_and_old_reports_none():
    assert measure.reordering(_flows(_receive(list(range(10))))) == {
        "out_of_order_pct": 0.0, "distance_max": 0, "distance_median": None, "distance_p99": None}
    old = measure.reordering(_flows(_receive([0, 2, 1, 3, 4, 5, 6, 7, 8, 9]), drop_distances=True))
    assert old == {"out_of_order_pct": 10.0, "distance_max": None, "distance_median": None, "distance_p99": None}
    assert measure.reordering(_flows(_receive([]), sent=0))["out_of_order_pct"] is None  # nothing received


def test_reorder_distance_quantiles_are_nearest_rank():
    hist = {1: 98, 7: 1, 50: 1}
    assert measure._rank(hist, 0.5) == 1 and measure._rank(hist, 0.99) == 7 and measure._rank(hist, 1.0) == 50


def test_the_probes_reordering_over_repetitions_and_in_the_summary():
    def run(pct, dmax):
        return {"probes": {"up": {"reorder": {"out_of_order_pct": pct, "distance_max": dmax, "distance_median": 1,
                                              "distance_p99": dmax}},
                           "down": {"reorder": {"out_of_order_pct": 0.0, "distance_max": 0,
                                                "distance_median": None, "distance_p99": None}}}}

    agg = reorder.probes_aggregate([run(12.5, 9), run(10.0, 4), run(20.0, 30)])
    assert agg["up"]["out_of_order_pct"] == {"n": 3, "min": 10.0, "median": 12.5, "max": 20.0}
    assert agg["up"]["distance_max"]["max"] == 30 and agg["down"]["distance_p99"]["n"] == 0
    assert reorder.probes_aggregate([{"probes": {}}, {}]) is None
    lines = reorder.probe_lines({"variants": {"spray": {"probe_reorder": agg}, "ecmp": {"probe_reorder": {
        "up": agg["down"]}}}})
    assert len(lines) == 3 and "spray up: 12.5 [10-20] %, distance max 9 [4-30]" in lines[2]  # down, ecmp: none


def test_packets_that_arrive_late_are_reordering_not_a_gap():
    """Seq 2 opens a 'gap' before 1 arrives: the receiver used to report it as one lost packet (a gap, and a
    loss before the first fault) though nothing was lost. A real loss beside it stays a gap."""
    r = _receive([0, 2, 1, 3, 6, 7, 8, 9])  # 1 late; 4 and 5 lost
    assert [g[:2] + g[6:] for g in r["gaps"]] == [[0, 2, 0], [3, 6, 2]]
    (fl,) = _flows(r)
    assert [(g.missing, round(g.ms)) for g in fl.gaps] == [(2, 20)]
    assert measure.unattributed_loss([fl], None) == 2 and fl.lost == 2

"""Crux's arithmetic without root: intensity from bytes per link and capacities, priorities, the contention
graph, compression onto K levels on synthetic graphs, and least-congested placement."""

import itertools

import pytest

import hpnlab.traffic.policies.arithmetic as crux

UP = ("tor-up", "s0r0a", "agg0-0")
UP2 = ("tor-up", "s0r0a", "agg0-1")
CAP = {UP: 100e6, UP2: 100e6}  # 100 Mbit/s


def test_intensity_is_work_over_the_most_loaded_links_time():
    # 1.25 MB on one 100 Mbit/s link: 0.1 s; 2 ranks x 0.5 s of compute: 1 GPU-second -> I = 10
    d = crux.Demand("a", work_s=1.0, link_bytes={UP: 1.25e6, UP2: 0.25e6})
    t, lk = crux.comm_time_s(d.link_bytes, CAP)
    assert t == pytest.approx(0.1) and lk == UP
    assert crux.intensity(d, CAP) == pytest.approx(10.0)
    # halve the link's capacity: its time doubles, the intensity halves
    assert crux.intensity(d, {UP: 50e6, UP2: 100e6}) == pytest.approx(5.0)


def test_a_job_on_no_shaped_link_is_infinitely_intensive_and_unshaped_links_are_not_bottlenecks():
    d = crux.Demand("a", work_s=1.0, link_bytes={("tor-up", "x", "y"): 1e9})
    assert crux.intensity(d, CAP) == float("inf")


def test_priority_is_k_times_intensity_and_ordered_with_ties_by_name():
    ds = [crux.Demand("b", 1.0, {UP: 1.25e6}), crux.Demand("a", 1.0, {UP: 1.25e6}),
          crux.Demand("c", 1.0, {UP: 1.25e6}, k=3.0)]
    p = crux.priorities(ds, CAP)
    assert p == {"a": pytest.approx(10), "b": pytest.approx(10), "c": pytest.approx(30)}
    assert crux.order(p) == ["c", "a", "b"]


def test_ring_bytes_and_flow_link_bytes():
    assert crux.ring_bytes_per_rank(4 * 1024, 4) == 6 * 1024
    assert crux.ring_bytes_per_rank(1024, 1) == 0
    row = {"src": "s0h0", "dst": "s1h0", "sport": 1, "port": "r0p0", "tor": "s0r0a", "agg": "agg0-0",
           "dst_tor": "s1r0a"}
    lb = crux.flow_link_bytes([row, row], 100.0)
    assert lb[("tor-up", "s0r0a", "agg0-0")] == 200.0 and lb[("host-up", "s0h0", "s0r0a")] == 200.0


def test_contention_pairs_are_jobs_sharing_a_link():
    ds = [crux.Demand("a", 1, {UP: 1}), crux.Demand("b", 1, {UP: 1, UP2: 1}), crux.Demand("c", 1, {UP2: 1}),
          crux.Demand("d", 1, {("tor-up", "q", "r"): 1})]
    assert crux.contention(ds) == {frozenset("ab"), frozenset("bc")}


def brute(prio, pairs, k):
    """The least weight kept inside levels over every assignment of levels that keeps precedence."""
    names = sorted(prio)
    edges = crux.dag(prio, pairs)
    best = float("inf")
    for lv in itertools.product(range(k), repeat=len(names)):
        m = dict(zip(names, lv))
        if any(m[hi] > m[lo] for hi, lo in edges):  # a higher job below one it contends with
            continue
        best = min(best, sum(w for (hi, lo), w in edges.items() if m[hi] == m[lo]))
    return best


def valid(res, prio, pairs, k):
    lv = res["levels"]
    assert set(lv) == set(prio) and all(0 <= x < k for x in lv.values())
    for hi, lo in crux.dag(prio, pairs):
        assert lv[hi] <= lv[lo], f"{hi} (higher) below {lo}"


def test_compression_with_enough_levels_separates_every_contending_pair():
    prio = {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}
    pairs = {frozenset(p) for p in itertools.combinations("abcd", 2)}  # a clique
    res = crux.compress(prio, pairs, 4)
    valid(res, prio, pairs, 4)
    assert res["levels"] == {"a": 0, "b": 1, "c": 2, "d": 3} and res["kept_weight"] == 0


def test_jobs_that_never_share_a_link_share_a_level():
    # two disjoint pairs: a>b on one link, c>d on another; two levels keep every precedence
    prio = {"a": 4.0, "c": 3.0, "b": 2.0, "d": 1.0}
    pairs = {frozenset("ab"), frozenset("cd")}
    res = crux.compress(prio, pairs, 2)
    valid(res, prio, pairs, 2)
    assert res["kept_weight"] == 0
    assert res["levels"]["a"] == res["levels"]["c"] == 0 and res["levels"]["b"] == res["levels"]["d"] == 1
    # the priority order alone (a c b d) cut into two contiguous levels could not do that: another order did
    assert res["orders"] > 1


def test_one_level_keeps_everything_and_merges_the_closest_priorities_first():
    prio = {"a": 10.0, "b": 9.0, "c": 1.0}
    pairs = {frozenset("ab"), frozenset("bc"), frozenset("ac")}
    one = crux.compress(prio, pairs, 1)
    assert set(one["levels"].values()) == {0} and one["cut_weight"] == 0
    two = crux.compress(prio, pairs, 2)
    # a and b differ by 1, b and c by 8: merging a with b loses least
    assert two["levels"] == {"a": 0, "b": 0, "c": 1} and two["kept_weight"] == pytest.approx(1.0)


@pytest.mark.parametrize("seed", range(25))
def test_compression_is_optimal_on_random_graphs(seed):
    import random

    rng = random.Random(seed)
    n, k = rng.randint(2, 7), rng.randint(1, 4)
    names = "abcdefg"[:n]
    prio = {j: round(rng.uniform(0.1, 10), 2) for j in names}
    pairs = {frozenset(p) for p in itertools.combinations(names, 2) if rng.random() < 0.5}
    res = crux.compress(prio, pairs, k)
    valid(res, prio, pairs, k)
    assert res["kept_weight"] == pytest.approx(brute(prio, pairs, k))


def test_many_jobs_fall_back_to_sampled_orders_and_stay_valid():
    names = [f"j{i:02d}" for i in range(12)]
    prio = {j: float(12 - i) for i, j in enumerate(names)}
    pairs = {frozenset((names[i], names[i + 1])) for i in range(0, 12, 2)}  # six disjoint pairs
    res = crux.compress(prio, pairs, 2, limit=200)
    valid(res, prio, pairs, 2)
    assert res["kept_weight"] == 0  # every pair split: each pair's higher job on top


def test_compress_refuses_zero_levels():
    with pytest.raises(ValueError):
        crux.compress({"a": 1.0}, set(), 0)


def row(src, dst, sport, tor, agg):
    return {"src": src, "dst": dst, "sport": sport, "port": "p", "tor": tor, "agg": agg, "dst_tor": "far"}


def test_placement_puts_each_connection_on_the_least_congested_path_in_priority_order():
    cap = {("tor-up", "t", "a0"): 100e6, ("tor-up", "t", "a1"): 100e6}
    cands = [row("h0", "h1", 1, "t", "a0"), row("h0", "h1", 2, "t", "a1")]
    got = crux.place([("hi", [cands, cands], 1000.0), ("lo", [cands], 1000.0)], cap)
    # the higher job's two connections spread over both uplinks; the lower job then shares one
    assert {r["agg"] for r in got["hi"]} == {"a0", "a1"}
    assert len(got["lo"]) == 1
    # a heavier first job on a0 pushes the next job to a1
    got = crux.place([("big", [[cands[0]]], 5000.0), ("next", [cands], 1000.0)], cap)
    assert got["next"][0]["agg"] == "a1"


def test_capacities_name_every_shaped_link_of_the_rail_by_tier():
    from hpnlab.model.spec import parse_spec
    from hpnlab.traffic.run.experiment import node_configs

    cfgs = node_configs(parse_spec({"name": "u", "segments": 2, "hosts_per_segment": 4, "rails": 1,
                                    "aggs_per_plane": 4, "links": {"access": {"rate_mbit": 20},
                                                                   "uplink": {"rate_mbit": 10}}}))
    cap = crux.capacities(cfgs)
    tiers = {lk[0] for lk in cap}
    assert tiers == {"host-up", "tor-up", "agg-down", "tor-down"}
    assert cap[("tor-up", "s0r0a", "agg0-0")] == 10e6
    assert cap[("host-up", "s0h0", cfgs["s0h0"].nic(0).tors[0])] == 20e6

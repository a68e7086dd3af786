"""Which echoes a reachability round sends (hpnlab.lifecycle.verify.reach_pairs), root-free on rendered labs: every
ordered pair on a small rail; on a large one each host is a source and a destination a bounded number of
times, through its own ToR pair and across to every other set."""

from __future__ import annotations

import json
from collections import Counter

from hpnlab.model.models import NodeConfig
from hpnlab.generate.render import render
from hpnlab.model.spec import parse_spec
from hpnlab.model.topology import build
from hpnlab.lifecycle.verify import REACH_ALL_PAIRS_MAX, reach_pairs


def hosts_of(**size) -> list[NodeConfig]:
    files = render(build(parse_spec({"name": "rp", **size})))
    topo = json.loads(files["topology.json"])
    cfgs = [NodeConfig.model_validate_json(files[f"{n['name']}/node.json"]) for n in topo["nodes"]]
    return [c for c in cfgs if c.role == "host"]


def echoes(by_host) -> list[tuple[int, str, str]]:
    return [e for rows in by_host.values() for e in rows]


def subnet_of(hosts) -> dict[str, str]:
    return {nic.ip: nic.subnet for h in hosts for nic in h.nics}


def test_a_small_rail_pings_every_ordered_pair():
    hosts = hosts_of(segments=2, hosts_per_segment=2, rails=2)  # the default lab's size: 4 hosts a rail
    got = echoes(reach_pairs(hosts))
    assert len(got) == 2 * 4 * 3 and len(set(got)) == len(got)
    assert all(s != d for _r, s, d in got)


def test_one_large_set_pings_each_host_once_as_source_and_once_as_destination():
    hosts = hosts_of(segments=1, hosts_per_segment=REACH_ALL_PAIRS_MAX * 2, rails=2)
    got = echoes(reach_pairs(hosts))
    for rail in (0, 1):
        mine = [(s, d) for r, s, d in got if r == rail]
        ips = {h.nic(rail).ip for h in hosts}
        assert len(mine) == len(ips)  # linear: 32 echoes, not 32 x 31
        assert Counter(s for s, _d in mine) == Counter(ips) == Counter(d for _s, d in mine)
        assert all(s != d for s, d in mine)


def test_several_sets_cross_to_every_other_set_and_stay_within_their_own():
    hosts = hosts_of(segments=3, hosts_per_segment=10, rails=1)  # 30 hosts on the rail, 3 sets of 10
    got = echoes(reach_pairs(hosts))
    sub = subnet_of(hosts)
    assert len(got) == 30 * 3  # per host: the next of its set, and one host in each of the 2 other sets
    assert Counter(d for _r, _s, d in got) == Counter({ip: 3 for ip in sub})
    crossing = Counter((sub[s], sub[d]) for _r, s, d in got)
    assert set(crossing) == {(a, b) for a in set(sub.values()) for b in set(sub.values())}, crossing
    assert all(n == 10 for n in crossing.values())


def test_without_the_arp_proxy_no_same_subnet_pair_is_asked():
    hosts = hosts_of(segments=2, hosts_per_segment=REACH_ALL_PAIRS_MAX, rails=1)
    sub = subnet_of(hosts)
    got = echoes(reach_pairs(hosts, arp_proxy=False))
    assert got and all(sub[s] != sub[d] for _r, s, d in got)
    small = echoes(reach_pairs(hosts_of(segments=2, hosts_per_segment=2, rails=1), arp_proxy=False))
    assert len(small) == 2 * 2 * 2  # all pairs minus the same-subnet ones: each host to the 2 of the other set

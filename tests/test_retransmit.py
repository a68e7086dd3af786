"""Flapping examined, without root: the hosts' TCP minimum RTO knob (spec tcp_rto_min_ms: validated, a
sysctl in each host's plan and nowhere else, refused on a kernel without it) and the analysis that puts
a workload's halts beside its connections' retransmission timer (hpnlab.traffic.analysis.retransmit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hpnlab.machine import kernel
from hpnlab.errors import SpecError
from hpnlab.node.plan import sysctls
from hpnlab.generate.render import render
from hpnlab.model.spec import parse_spec
from hpnlab.model.topology import build
from hpnlab.traffic.analysis.retransmit import halts, parse_ss, retransmissions, returns, sending, timer_during

KEY = "net.ipv4.tcp_rto_min_us"
EVERYTHING = {k: True for k in kernel.FEATURES}


def spec(**kw):
    return parse_spec({"name": "r", **kw})


def test_the_knob_is_a_sysctl_on_every_host_and_on_no_router():
    files = render(build(spec(tcp_rto_min_ms=1000)))
    cfgs = {p.split("/")[0]: json.loads(t) for p, t in files.items() if p.endswith("/node.json")}
    hosts = [n for n, c in cfgs.items() if c["role"] == "host"]
    assert hosts and all(sysctls(cfgs[h])[KEY] == 1_000_000 for h in hosts)
    assert not [n for n, c in cfgs.items() if c["role"] != "host" and KEY in c["sysctls"]]
    # unset, the kernel's own 200 ms stays: no host's plan names it
    plain = render(build(spec()))
    assert not [p for p, t in plain.items() if p.endswith("/node.json") and KEY in t]


@pytest.mark.parametrize("value", [0, -5, 120001, "slow", 1.5])
def test_a_bad_value_is_one_line_naming_the_field(value):
    with pytest.raises(SpecError) as e:
        spec(tcp_rto_min_ms=value)
    assert "tcp_rto_min_ms" in str(e.value) and "\n" not in str(e.value)


def test_a_kernel_without_the_sysctl_refuses_only_specs_that_set_it():
    lacking = {**EVERYTHING, "rto-min": False}
    assert kernel.assess(spec(), lacking).refusal is None
    refused = kernel.assess(spec(tcp_rto_min_ms=1000), lacking, "6.8.0").refusal
    assert refused.startswith("spec field 'tcp_rto_min_ms'") and "6.11" in refused and "\n" not in refused
    assert kernel.assess(spec(tcp_rto_min_ms=1000), EVERYTHING).refusal is None


@pytest.mark.skipif(os.geteuid() != 0, reason="hpnlab doctor probes qdiscs in a throw-away namespace: needs root")
def test_the_cli_refuses_the_knob_before_any_lab_on_such_a_kernel(tmp_path):
    f = tmp_path / "s.yml"
    f.write_text("name: r\ntcp_rto_min_ms: 1000\n")
    r = subprocess.run([sys.executable, "-m", "hpnlab.cli", "doctor", str(f)], capture_output=True, text=True,
                       env={"HPNLAB_KERNEL_LACKS": "rto-min", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "tcp_rto_min_ms" in r.stdout + r.stderr and "Traceback" not in r.stderr


SS = """\
ESTAB 0      0      10.0.0.2:41000 10.0.0.3:17000
\t cubic wscale:7,7 rto:1632 backoff:3 rtt:0.2/0.1 mss:1448 cwnd:1 retrans:1/9 lost:3
ESTAB 0      0      10.0.0.2:17000 10.0.1.3:52000
\t cubic wscale:7,7 rto:204 rtt:0.3/0.1 mss:1448 cwnd:10
"""


def test_ss_output_is_one_record_per_connection_with_its_timer():
    conns = parse_ss(SS)
    assert conns == [
        {"local": "10.0.0.2:41000", "peer": "10.0.0.3:17000", "rto_ms": 1632.0, "backoff": 3, "retrans": 9},
        {"local": "10.0.0.2:17000", "peer": "10.0.1.3:52000", "rto_ms": 204.0, "backoff": 0, "retrans": 0}]
    # the header ss prints without -H is no connection
    assert parse_ss("State Recv-Q Send-Q Local Address:Port Peer Address:Port\n" + SS) == conns


def test_the_sending_connections_are_the_hosts_own_and_those_into_it():
    me = {"node": "s0h0", "conns": parse_ss(SS)}
    assert [c["local"] for c in sending(me, "s0h0", "10.0.0.2", 17000)] == ["10.0.0.2:41000"]
    prev = {"node": "s1h1", "conns": [{"local": "10.0.1.3:52000", "peer": "10.0.0.2:17000", "rto_ms": 800.0,
                                       "backoff": 2, "retrans": 4},
                                      {"local": "10.0.1.3:52001", "peer": "10.0.1.2:17000", "rto_ms": 5000.0,
                                       "backoff": 5, "retrans": 7}]}
    assert [c["local"] for c in sending(prev, "s0h0", "10.0.0.2", 17000)] == ["10.0.1.3:52000"]


def test_halts_are_the_gaps_between_iterations_overlapping_the_window_longest_first():
    its = [0.0, 0.25, 0.5, 2.0, 2.125, 3.0, 3.0625, 9.0]
    assert halts(its, 0.3, 3.0) == [(0.5, 2.0), (2.125, 3.0), (0.25, 0.5), (2.0, 2.125)]
    assert halts(its, 3.5, 4.0) == [(3.0625, 9.0)]  # a halt that spans the whole window is in it
    assert halts([1.0], 0, 2) == []


def conn(local, rto, backoff, retrans, peer="10.0.0.3:17000"):
    return {"local": local, "peer": peer, "rto_ms": rto, "backoff": backoff, "retrans": retrans}


def test_the_timer_and_retransmissions_in_a_window():
    samples = [{"t": 0.0, "node": "s0h0", "conns": [conn("a:1", 204, 0, 5), conn("a:2", 204, 0, 0)]},
               {"t": 1.0, "node": "s0h0", "conns": [conn("a:1", 816, 2, 7), conn("a:2", 408, 1, 1)]},
               {"t": 2.0, "node": "s0h0", "conns": [conn("a:1", 1632, 3, 8), conn("a:2", 204, 0, 1)]},
               {"t": 3.0, "node": "s0h0", "conns": [conn("a:1", 204, 0, 8), conn("a:3", 204, 0, 2)]}]
    assert timer_during(samples, 0.5, 2.5, "s0h0", "10.0.0.2", 17000) == \
        {"samples": 2, "max_rto_ms": 1632.0, "max_backoff": 3}
    assert timer_during(samples, 5, 6, "s0h0", "10.0.0.2", 17000) == \
        {"samples": 0, "max_rto_ms": None, "max_backoff": None}
    # a:1 5 -> 8, a:2 0 -> 1, a:3 (new in the window) counts from its first sample: 0
    assert retransmissions(samples, 0.5, 3.0, "s0h0", "10.0.0.2", 17000) == 4


def ev(t, node, kind, what):
    return {"t_ms": t, "node": node, "kind": kind, "what": what}


def test_each_return_of_a_host_that_lost_both_ports_is_timed_from_its_carrier():
    nh = "rail 0 10.0.0.2: nexthops "
    events = [ev(16.0, "s0h0", "carrier", "r0p0: carrier down"), ev(16.0, "s0h0", "nexthop", nh + "['r0p0', 'r0p1'] -> ['r0p1']"),
              ev(24.6, "s0h0", "nexthop", nh + "['r0p1'] -> []"), ev(136.1, "agg0-0", "fib", "del 10.0.0.2/32 via s0r0"),
              ev(529.9, "s0h0", "carrier", "r0p0: carrier up"), ev(530.4, "s0h0", "nexthop", nh + "[] -> ['r0p0']"),
              ev(536.7, "s0h0", "carrier", "r0p1: carrier up"), ev(537.7, "s0h0", "nexthop", nh + "['r0p0'] -> ['r0p0', 'r0p1']"),
              ev(600.0, "agg0-1", "fib", "add 10.0.0.3/32 via s0r0"),  # another host's route: not this one
              ev(652.6, "agg0-0", "fib", "add 10.0.0.2/32 via s0r0"), ev(700.0, "agg0-1", "fib", "add 10.0.0.2/32 via s0r0"),
              # the second time: the carrier came back but the host never routed again within the events
              ev(1056.7, "s0h0", "nexthop", nh + "['r0p1'] -> []"), ev(1567.0, "s0h0", "carrier", "r0p0: carrier up")]
    assert returns(list(reversed(events)), "s0h0", "10.0.0.2") == [
        {"cut_ms": 24.6, "up_ms": 529.9, "host_ms": 0.5, "agg_ms": 122.7},
        {"cut_ms": 1056.7, "up_ms": 1567.0, "host_ms": None, "agg_ms": None}]
    # one port of two flapping: the host always had a port, so it never waited to come back
    assert returns(events[:2] + events[4:6], "s0h0", "10.0.0.2") == []

"""The agents' raw rtnetlink (hpnlab.node.rtnl): messages built by hand, checked against what the kernel
and iproute2 read back in a throw-away network namespace (``unshare -n``: nothing is left when it exits)."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import sys
import textwrap

import pytest

from hpnlab.node import rtnl
from tests.conftest import ROOT


def test_route_body_layout():
    body = rtnl.route_body("10.1.2.3/32", 10, oif=7, proto=99, scope=rtnl.RT_SCOPE_LINK)
    family, dst_len, _s, _t, table, proto, scope, rtype, _f = struct.unpack_from("=BBBBBBBBI", body)
    assert (family, dst_len, table, proto, scope, rtype) == (socket.AF_INET, 32, 10, 99, 253, rtnl.RTN_UNICAST)
    attrs = dict(rtnl.rtattrs(body, 12))
    assert attrs[rtnl.RTA_DST] == socket.inet_aton("10.1.2.3")
    assert struct.unpack("=I", attrs[rtnl.RTA_TABLE])[0] == 10 and struct.unpack("=i", attrs[rtnl.RTA_OIF])[0] == 7
    assert rtnl.parse_route(body) == (10, "10.1.2.3/32")
    big = rtnl.route_body("10.0.0.0/24", 1000)  # tables >= 256 only fit the attribute (rtm_table says COMPAT)
    assert big[4] == 252 and rtnl.parse_route(big) == (1000, "10.0.0.0/24")


def test_neigh_body_layout():
    body = rtnl.neigh_body("10.1.2.3", 7, flags=rtnl.NTF_USE)
    family, ifindex, state, flags, ntype = struct.unpack_from("=BxxxiHBB", body)
    assert (family, ifindex, state, flags, ntype) == (socket.AF_INET, 7, rtnl.NUD_NONE, rtnl.NTF_USE, 0)
    assert rtnl.parse_neigh(body) == (7, rtnl.NUD_NONE, "10.1.2.3")
    assert rtnl.route_oif(rtnl.route_body("10.1.2.3/32", 10, oif=7)) == 7
    assert rtnl.route_oif(rtnl.route_body("10.1.2.3/32", 10)) is None


def test_attributes_are_padded_and_walk_back():
    a = rtnl.attr(3, b"eth0\0") + rtnl.attr(1, b"\1\2\3\4")
    assert len(a) % 4 == 0 and list(rtnl.rtattrs(a, 0)) == [(3, b"eth0\0"), (1, b"\1\2\3\4")]


CHILD = textwrap.dedent("""
    import errno, json, socket, subprocess
    from hpnlab.node import rtnl

    def ip(*a):
        return subprocess.run(["ip", *a], check=True, capture_output=True, text=True).stdout

    ip("link", "add", "d0", "type", "veth", "peer", "name", "d1")  # the lab's own link kind
    ip("link", "set", "d1", "up")
    idx = socket.if_nametoindex("d0")
    rtnl.link_set_up(idx, True)
    assert "UP" in json.loads(ip("-j", "link", "show", "d0"))[0]["flags"]
    assert rtnl.dump_links()["d0"] is True
    assert rtnl.link_names()[idx] == "d0"

    rtnl.route_replace("10.9.0.5/32", 10, oif=idx, scope=rtnl.RT_SCOPE_LINK, proto=99)
    (r,) = json.loads(ip("-N", "-j", "route", "show", "table", "10"))   # -N: numbers, not rt_protos names
    assert (r["dst"], r["dev"], r["scope"], r["protocol"]) == ("10.9.0.5", "d0", "253", "99"), r
    assert rtnl.route_prefixes(10) == {"10.9.0.5/32"} and "10.9.0.5/32" not in rtnl.route_prefixes(254)

    assert rtnl.route_oifs(10) == {"10.9.0.5/32": idx}

    rtnl.route_replace("10.9.0.5/32", 10, rtype=rtnl.RTN_BLACKHOLE, proto=99)   # replaced, not added
    (r,) = json.loads(ip("-j", "route", "show", "table", "10"))
    assert r["type"] == "blackhole", r
    rtnl.route_delete("10.9.0.5/32", 10)
    assert json.loads(ip("-j", "route", "show", "table", "10")) == []
    try:
        rtnl.route_delete("10.9.0.5/32", 10)
        raise SystemExit("deleting a missing route did not raise")
    except OSError as e:
        assert e.errno == errno.ESRCH, e

    ip("neigh", "add", "10.9.0.7", "lladdr", "02:00:00:00:00:07", "dev", "d0")
    assert (idx, 0x80, "10.9.0.7") in rtnl.dump_neighbours()      # NUD_PERMANENT

    # NTF_USE resolves an address nobody holds an entry for: an ARP request now, the entry INCOMPLETE
    ip("addr", "add", "10.9.0.1/24", "dev", "d0")
    rtnl.neigh_solicit("10.9.0.8", idx)
    assert (idx, 0x01, "10.9.0.8") in rtnl.dump_neighbours()      # NUD_INCOMPLETE

    rtnl.link_set_up(idx, False)
    assert "UP" not in json.loads(ip("-j", "link", "show", "d0"))[0]["flags"]
    assert rtnl.dump_links()["d0"] is False
    print("rtnl ok")
""")


def test_writes_and_dumps_against_the_kernel():
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        why = "needs root, unshare (util-linux) and ip (iproute2) for a throw-away network namespace"
        print(f"SKIP: {why}", file=sys.stderr)
        pytest.skip(why)
    r = subprocess.run(["unshare", "-n", sys.executable, "-c", CHILD], capture_output=True, text=True, cwd=ROOT,
                       timeout=60)
    assert r.returncode == 0 and "rtnl ok" in r.stdout, r.stderr[-2000:]


STALE_DUMP = textwrap.dedent("""
    import subprocess, time
    from hpnlab.node.agents.tor import TorAgent

    def ip(*a):
        subprocess.run(["ip", *a], check=True, capture_output=True, text=True)

    # the agent reads its ports' MACs from sysfs: this namespace's own (unshare -m keeps the mount private)
    subprocess.run(["mount", "-t", "sysfs", "sysfs", "/sys"], check=True)
    ip("link", "add", "d0", "type", "veth", "peer", "name", "d1")
    ip("link", "set", "d0", "up")  # no carrier yet: its peer is down
    cfg = {"name": "t", "mechanisms": {"lacp": True, "host_routes": True}, "table": 10, "subnet": "10.9.0.0/24",
           "gateway": "10.9.0.1", "host_ports": [{"iface": "d0", "port_id": 1, "host": "h", "host_ip": "10.9.0.2"}],
           "lacp": {"system_mac": "00:00:5e:00:01:01", "key": 1, "system_priority": 1, "fast_rate": True}}
    agent = TorAgent(cfg, None)
    t = time.monotonic()
    agent.resync(t)
    assert not agent.ports[0].enabled
    stale = agent._dump_carriers(t + 1)  # the periodic dump, asked for and made while the link is down ...
    ip("link", "set", "d1", "up")
    time.sleep(0.2)
    agent._netlink(t + 2)  # ... the carrier-up event arrives ...
    assert agent.ports[0].enabled
    agent.writer.out.put(stale)  # ... and then the writer hands the dump back
    agent._collect(t + 3)
    assert agent.ports[0].enabled, "a dump older than the event undid it"
    # a dump asked for after the last event is newer: it is applied (the safety net still works)
    ip("link", "set", "d1", "down")
    agent.writer.out.put(agent._dump_carriers(t + 4))
    agent._collect(t + 5)
    assert not agent.ports[0].enabled
    print("stale ok")
""")


def test_a_carrier_dump_older_than_an_event_does_not_undo_it():
    """The ToR agent's periodic carrier dump runs on its writer thread and is read back later: a link
    repaired in between must stay up (it stayed down until the next dump, 5 s, in one CI run)."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        why = "needs root, unshare (util-linux) and ip (iproute2) for a throw-away network namespace"
        print(f"SKIP: {why}", file=sys.stderr)
        pytest.skip(why)
    r = subprocess.run(["unshare", "-n", "-m", sys.executable, "-c", STALE_DUMP], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert r.returncode == 0 and "stale ok" in r.stdout, r.stderr[-2000:]

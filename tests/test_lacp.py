"""The LACP speaker's machines, driven with explicit time; frames cross-checked with scapy's LACP layer."""

from __future__ import annotations

import pytest

from hpnlab.node import lacp

VMAC = "00:00:5e:00:01:01"


def pair(tor_port=301, key=1, now=0.0):
    host = lacp.Port("r0p0", "02:00:00:00:00:01", "02:00:00:00:00:01", 1, 1)
    tor = lacp.Port("h0p0", VMAC, VMAC, key, tor_port)
    for p in (host, tor):
        p.set_enabled(True, now)
    return host, tor


def exchange(a, b, now, select=lacp.select_individual):
    """Deliver what each side has to send, then run selection and timers, until quiet."""
    for _ in range(6):
        fa, fb = a.due(now), b.due(now)
        if fa:
            b.receive(*lacp.decode(fa), now)
        if fb:
            a.receive(*lacp.decode(fb), now)
        for p in (a, b):
            select([p])
            p.tick(now)
        if not fa and not fb:
            return


def test_codec_roundtrip_and_scapy_agrees():
    actor = lacp.Info(65535, VMAC, 7, 255, 601, lacp.ACTIVITY | lacp.TIMEOUT | lacp.SYNC)
    frame = lacp.encode(VMAC, actor, lacp.Info())
    assert len(frame) == 14 + 110
    assert lacp.decode(frame) == (actor, lacp.Info())
    scapy_lacp = pytest.importorskip("scapy.contrib.lacp")
    from scapy.layers.l2 import Ether

    pkt = Ether(frame)
    l = pkt[scapy_lacp.LACP]
    assert (l.actor_system, l.actor_key, l.actor_port_number) == (VMAC, 7, 601)
    assert l.actor_state == actor.state


def test_decode_rejects_garbage():
    assert lacp.decode(b"\x00" * 20) is None
    f = bytearray(lacp.encode(VMAC, lacp.Info(), lacp.Info()))
    f[14] = 2  # marker protocol, not LACP
    assert lacp.decode(bytes(f)) is None


def test_aggregates_to_collecting_distributing():
    host, tor = pair()
    exchange(host, tor, 0.0)
    assert host.distributing and tor.distributing
    assert host.partner.system == VMAC and host.partner.port == 301


def test_expired_clears_sync_at_3s_not_defaulted():
    host, tor = pair()
    exchange(host, tor, 0.0)
    # one-way failure: the ToR stops hearing the host, the host still hears the ToR
    t = 0.0
    while t < 10 and tor.distributing:
        t += 0.1
        tor.tick(t)
        lacp.select_individual([tor])
        f = tor.due(t)
        if f:
            host.receive(*lacp.decode(f), t)
            lacp.select([host])
            host.tick(t)
    assert not tor.distributing and tor.rx == "expired"
    assert 2.9 <= t <= 3.2, t
    # the host learns it at once from the ToR's next PDU (Sync cleared), not after DEFAULTED
    assert not host.distributing


def test_defaulted_after_two_timeouts():
    host, tor = pair()
    exchange(host, tor, 0.0)
    tor.tick(3.01)
    tor.tick(6.02)
    assert tor.rx == "defaulted" and tor.partner is None
    assert tor.actor().state & lacp.DEFAULTED


def test_carrier_loss_detaches_immediately():
    host, tor = pair()
    exchange(host, tor, 0.0)
    tor.set_enabled(False, 0.5)
    assert tor.mux == "detached" and not tor.distributing


def bond_pair(system_b):
    """A host NIC's two ports against ToR a (virtual MAC) and ToR b (``system_b``), run to quiescence."""
    h0 = lacp.Port("r0p0", "02:00:00:00:00:01", "02:00:00:00:00:01", 1, 1)
    h1 = lacp.Port("r0p1", "02:00:00:00:00:01", "02:00:00:00:00:01", 1, 2)
    t_a, t_b = lacp.Port("h0p0", VMAC, VMAC, 1, 301), lacp.Port("h0p1", system_b, system_b, 1, 601)
    for p in (h0, h1, t_a, t_b):
        p.set_enabled(True, 0)
    for _ in range(6):
        for h, t in ((h0, t_a), (h1, t_b)):
            for src, dst in ((t, h), (h, t)):
                f = src.due(0)
                if f:
                    dst.receive(*lacp.decode(f), 0)
        lacp.select([h0, h1])
        lacp.select_individual([t_a, t_b])
        for p in (h0, h1, t_a, t_b):
            p.tick(0)
    return h0, h1


def test_host_selects_one_partner_system():
    """Two ports whose partners differ in system MAC are not aggregated together (OVS behaves so too)."""
    assert sum(p.distributing for p in bond_pair("02:aa:00:00:00:01")) == 1


def test_same_virtual_system_aggregates_both_ports():
    assert all(p.distributing for p in bond_pair(VMAC))


def test_periodic_fast_rate():
    host, tor = pair()
    exchange(host, tor, 0.0)
    assert tor.due(0.5) is None and tor.due(1.0) is not None


def test_rtnetlink_neighbour_messages_parse():
    """The agents read rtnetlink themselves: two messages in one datagram, an ndmsg with NDA_DST."""
    import socket
    import struct

    from hpnlab.node.rtnl import RTM_DELNEIGH, RTM_NEWLINK, parse_neigh, split_nl

    def msg(mtype: int, payload: bytes) -> bytes:
        m = struct.pack("=IHHII", 16 + len(payload), mtype, 0, 0, 0) + payload
        return m + b"\0" * (-len(m) % 4)

    dst = struct.pack("=HH", 8, 1) + socket.inet_aton("10.0.0.2")
    lladdr = struct.pack("=HH", 10, 2) + bytes.fromhex("020000000000") + b"\0\0"
    nd = struct.pack("=BBHiHBB", socket.AF_INET, 0, 0, 7, 0x02, 0, 1) + lladdr + dst
    buf = msg(RTM_NEWLINK, b"\0" * 16) + msg(RTM_DELNEIGH, nd)
    msgs = split_nl(buf)
    assert [t for t, _ in msgs] == [RTM_NEWLINK, RTM_DELNEIGH]
    assert parse_neigh(msgs[1][1]) == (7, 0x02, "10.0.0.2")
    v6 = struct.pack("=BBHiHBB", socket.AF_INET6, 0, 0, 3, 0x02, 0, 1) + struct.pack("=HH", 20, 1) + b"\0" * 16
    assert parse_neigh(v6) == (3, 0x02, None)
    assert split_nl(buf[:20]) == []  # a truncated datagram yields nothing rather than garbage

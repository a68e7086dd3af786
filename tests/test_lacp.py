"""The LACP speaker's machines, driven with explicit time; frames cross-checked with scapy's LACP layer."""

from __future__ import annotations

import pytest

from hpnlab.node.agents import lacp

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


# --- lacp.Timers: step only the ports touched or due ------------------------------------------------------
class _Side:
    """One agent's ports, stepped the way the agents step them: every port at every wake-up (``timers`` None:
    the reference, what the agents did before lacp.Timers) or only those lacp.Timers gives."""

    def __init__(self, ports, select, timers):
        self.ports, self.select, self.timers = ports, select, timers
        self.log = []

    def deadline(self, now):
        if self.timers:
            return self.timers.next_deadline(now)
        return min([p.next_deadline() for p in self.ports if p.enabled] or [now + 1.0])

    def touch(self, p):
        if self.timers:
            self.timers.touch(p)

    def step(self, now, out):
        ports = self.timers.due(now) if self.timers else self.ports
        self.select(ports)
        for p in ports:
            p.tick(now)
            self.log += [(round(now, 6), e) for e in p.events]
            p.events.clear()
        for p in ports:
            f = p.due(self.timers.send_time(p, now) if self.timers else now)
            if f:
                out.append((now, p.iface, f))
            if self.timers:
                self.timers.schedule(p)


def _simulate(slack, until=40.0, n=6, delay=0.002):
    """n hosts' ports against one ToR's n ports (each its own aggregate), with a PDU delay; at 10 s host 2's
    port goes silent (its ToR port expires, then defaults), at 20 s ToR port 4 loses carrier for 2 s."""
    hosts = [lacp.Port(f"r0p{i}", f"02:00:00:00:00:{i:02x}", f"02:00:00:00:00:{i:02x}", 1, 1) for i in range(n)]
    tors = [lacp.Port(f"h{i}p0", VMAC, VMAC, 1, 301 + i) for i in range(n)]
    timers = (lambda ps: lacp.Timers(ps, slack)) if slack is not None else (lambda ps: None)
    host = _Side(hosts, lambda ps: [lacp.select([p]) for p in ps], timers(hosts))
    tor = _Side(tors, lacp.select_individual, timers(tors))
    peer = {p.iface: q for p, q in zip(hosts + tors, tors + hosts)}
    side = {id(p): s for s in (host, tor) for p in s.ports}
    # every port comes up at a different time, as links do
    carrier = sorted([(0.013 * i, p, True) for i, p in enumerate(hosts + tors)] + [(20.0, tors[4], False),
                     (22.0, tors[4], True), (20.0, hosts[4], False), (22.0, hosts[4], True)], key=lambda c: c[0])
    wire, sent, now = [], [], 0.0
    while now < until:
        nxt = min([host.deadline(now), tor.deadline(now)] + [w[0] for w in wire] + [c[0] for c in carrier[:1]])
        now = max(now, nxt)
        while carrier and carrier[0][0] <= now:
            _, p, up = carrier.pop(0)
            p.set_enabled(up, now)
            side[id(p)].touch(p)
        for w in [w for w in wire if w[0] <= now]:
            wire.remove(w)
            dst = peer[w[1]]
            if dst.enabled and not (w[1] == "r0p2" and 10.0 <= w[0] < 30.0):
                dst.receive(*lacp.decode(w[2]), now)
                side[id(dst)].touch(dst)
        for s in (host, tor):
            out = []
            s.step(now, out)
            sent += [(t, ifc) for t, ifc, _ in out]
            wire += [(t + delay, ifc, f) for t, ifc, f in out]
    return host, tor, sent


def test_timers_step_exactly_what_stepping_every_port_does():
    """Without the slack, stepping only the touched and due ports sends the same PDUs at the same times and
    logs the same transitions as stepping every port at every wake-up."""
    ref_host, ref_tor, ref_sent = _simulate(None)
    host, tor, sent = _simulate(0.0)
    assert sent == ref_sent
    assert tor.log == ref_tor.log and host.log == ref_host.log
    assert any("partner expired" in e for _, e in tor.log) and any("defaulted" in e for _, e in tor.log)
    assert [p.mux for p in tor.ports] == [p.mux for p in ref_tor.ports]


def test_timers_slack_batches_sends_and_keeps_every_period_and_timeout():
    ref_host, ref_tor, ref_sent = _simulate(None)
    host, tor, sent = _simulate(0.05)
    # the same transitions, port by port, each within the slack of the reference's time
    for side, ref in ((tor, ref_tor), (host, ref_host)):
        assert [e for _, e in side.log] == [e for _, e in ref.log]
        assert all(abs(t - rt) <= 0.05 + 1e-9 for (t, _), (rt, _) in zip(side.log, ref.log))
    # a port's periodic PDUs keep their schedule, a period apart (fast: 1 s; not across port 4's carrier
    # loss), each sent at most the slack early: two sends are at most a period and the slack apart
    by_port = {}
    for t, ifc in sent:
        by_port.setdefault(ifc, []).append(t)
    gaps = [b - a for ifc, ts in by_port.items() if "4" not in ifc for a, b in zip(ts, ts[1:])]
    assert max(gaps) <= 1.0 + 0.05 + 1e-9
    assert sum(1 for g in gaps if g >= 0.95 - 1e-9) >= 0.9 * len(gaps)  # periodic, not NTT, sends
    # and fewer wake-ups send them: the ToR's 6 ports' PDUs share instants
    assert len({round(t, 6) for t, ifc in sent if ifc.startswith("h")}) < \
        len({round(t, 6) for t, ifc in ref_sent if ifc.startswith("h")})
    assert all(p.distributing for p in tor.ports)


def test_agent_wait_never_wakes_before_its_deadline_and_returns_ready_fds():
    """The agents' wait (an epoll kept across calls, whole ms, the rest slept off): a timer is never run
    early, and a ready socket ends the wait."""
    import socket
    import time

    from hpnlab.node.agents import agent

    a, b = socket.socketpair()
    c, d = socket.socketpair()
    try:
        for _ in range(5):
            t0 = time.monotonic()
            assert agent.wait([a.fileno()], t0 + 0.0125) == []
            assert time.monotonic() >= t0 + 0.0125
        b.send(b"x")
        assert agent.wait([a.fileno(), c.fileno()], time.monotonic() + 5) == [a.fileno()]
        d.send(b"y")  # another set of fds: the epoll set follows it
        assert agent.wait([c.fileno()], time.monotonic() + 5) == [c.fileno()]
    finally:
        for s in (a, b, c, d):
            s.close()


def test_agent_wait_hears_a_socket_that_took_a_closed_ones_number():
    import socket
    import time

    from hpnlab.node.agents import agent

    a, b = socket.socketpair()
    fd = a.fileno()
    agent.wait([fd], time.monotonic())
    a.close()
    agent.closed_fd()
    c, d = socket.socketpair()
    try:
        if c.fileno() != fd and d.fileno() == fd:
            c, d = d, c
        d.send(b"x")
        assert agent.wait([c.fileno()], time.monotonic() + 5) == [c.fileno()]
    finally:
        for s in (b, c, d):
            s.close()


def test_a_dilated_port_runs_every_timer_k_times_slower():
    """spec time_dilation k: the periodic PDU every k s and the short timeout 3k s, on both ends; the PDU's
    bits are the production ones (Timeout still says short)."""
    k = 10
    host = lacp.Port("r0p0", "02:00:00:00:00:01", "02:00:00:00:00:01", 1, 1, scale=k)
    tor = lacp.Port("h0p0", VMAC, VMAC, 1, 301, scale=k)
    for p in (host, tor):
        p.set_enabled(True, 0.0)
    exchange(host, tor, 0.0)
    assert host.distributing and tor.distributing
    assert tor.due(0.5 * k) is None and tor.due(1.0 * k) is not None
    assert tor.actor().state & lacp.TIMEOUT
    tor.tick(3.0 * k - 0.01)
    assert tor.rx == "current"  # an undilated port would have expired at 3 s
    tor.tick(3.0 * k + 0.01)
    assert tor.rx == "expired" and not tor.distributing
    tor.tick(6.0 * k + 0.02)
    assert tor.rx == "defaulted"

"""Root-free parts of the access options: micro-BFD (packets checked against scapy's independent BFD
decoder, the RFC 5880 state machine), and the ToR hold-down's and micro-BFD's spec fields."""

from __future__ import annotations

import pytest

from hpnlab.errors import SpecError
from hpnlab.node.agents import microbfd
from hpnlab.model.spec import parse_spec
from hpnlab.traffic.run.experiment import node_configs


def test_control_packet_and_frame_decode_with_scapy():
    from scapy.contrib.bfd import BFD
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    payload = microbfd.encode(microbfd.INIT, 3, 0x1234, 0xBEEF, 100_000, 100_000, diag=microbfd.DIAG_NONE)
    raw = microbfd.frame("02:00:00:00:00:01", "10.0.0.2", "10.0.0.1", payload)
    pkt = Ether(raw)
    assert pkt.dst == microbfd.MAC and pkt[IP].ttl == 255 and pkt[UDP].dport == 6784
    assert 49152 <= pkt[UDP].sport <= 65535
    # checksums as scapy computes them
    again = Ether(bytes(pkt))
    del again[IP].chksum, again[UDP].chksum
    again = Ether(bytes(again))
    assert again[IP].chksum == pkt[IP].chksum and again[UDP].chksum == pkt[UDP].chksum
    b = BFD(bytes(pkt[UDP].payload))
    assert (b.version, b.sta, b.detect_mult, b.len) == (1, microbfd.INIT, 3, 24)
    assert (b.my_discriminator, b.your_discriminator) == (0x1234, 0xBEEF)
    assert b.min_tx_interval == 100_000 == b.min_rx_interval
    assert microbfd.decode(payload)["state"] == microbfd.INIT
    assert microbfd.decode(b"\0" * 24) is None and microbfd.decode(payload[:10]) is None


def _pair(interval=0.1, mult=3):
    a = microbfd.Session("r0p0", 1, interval, mult)
    b = microbfd.Session("h0p0", 2, interval, mult)
    a.set_enabled(True, 0.0)
    b.set_enabled(True, 0.0)
    return a, b


def _exchange(a, b, now):
    pa, pb = a.due(now), b.due(now)
    if pa:
        b.receive(microbfd.decode(pa), now)
    if pb:
        a.receive(microbfd.decode(pb), now)


def test_three_way_handshake_then_detection_and_signalled_down():
    a, b = _pair()
    t = 0.0
    for _ in range(6):
        _exchange(a, b, t)
        t += 0.1
    assert a.up and b.up
    # b goes silent (a hung ToR): a notices within mult x interval, not before
    last_heard = t - 0.1
    while a.up:
        a.due(t)
        a.tick(t)
        t += 0.01
    assert 0.29 <= t - last_heard <= 0.32 and a.diag == microbfd.DIAG_DETECT_EXPIRED
    # back: up again; then b's carrier drops and it tells a on the next packet
    for _ in range(6):
        _exchange(a, b, t)
        t += 0.1
    assert a.up and b.up
    b.set_enabled(False, t)
    b.set_enabled(True, t)
    b.next_tx = 0
    a.receive(microbfd.decode(b.due(t)), t)
    assert not a.up and a.diag == microbfd.DIAG_NEIGHBOR_DOWN


def test_a_packet_for_another_session_is_ignored():
    a, b = _pair()
    pkt = microbfd.decode(microbfd.encode(microbfd.UP, 3, 99, 12345, 100_000, 100_000))
    a.receive(pkt, 0.0)
    assert a.rx == 0 and a.state == microbfd.DOWN


@pytest.mark.parametrize("data, field", [
    ({"micro_bfd": {"enabled": True, "interval_ms": 5}}, "micro_bfd.interval_ms"),
    ({"micro_bfd": {"multiplier": 1}}, "micro_bfd.multiplier"),
    ({"holddown": {"enabled": True, "max_s": 0}}, "holddown.max_s"),
    ({"holddown": {"bound": 3}}, "holddown.bound"),
])
def test_bad_access_option_values_name_the_field(data, field):
    with pytest.raises(SpecError) as e:
        parse_spec({"name": "x", **data})
    assert f"'{field}'" in str(e.value) and "\n" not in str(e.value)


def test_options_reach_the_agents_node_json():
    c = node_configs(parse_spec({"name": "x", "holddown": {"enabled": True, "max_s": 12},
                                 "micro_bfd": {"enabled": True, "interval_ms": 50}}))
    tor, host = c["s0r0a"].plain(), c["s0h0"].plain()  # what the agents read
    assert tor["holddown"] == {"enabled": True, "max_s": 12.0}
    assert tor["remote_subnets"] == ["10.0.2.0/24"]  # the other set of rail 0 (segment 1)
    assert tor["micro_bfd"]["interval_ms"] == 50 == host["micro_bfd"]["interval_ms"]
    assert {hp["host_ip"] for hp in tor["host_ports"]} == {"10.0.0.2", "10.0.0.3"}


def test_hold_down_is_bounded_and_ends_with_the_routes():
    from hpnlab.node.agents.tor import HoldDown

    h = HoldDown(True, 5.0)
    assert h.update(0.0, ["10.0.2.0/24"]) and h.held
    assert h.update(4.9, ["10.0.2.0/24"])
    assert not h.update(5.0, ["10.0.2.0/24"]) and h.bound_hit  # never kept out longer than the bound
    assert not h.update(60.0, ["10.0.2.0/24"])  # the same episode stays released
    assert not h.update(61.0, []) and not h.bound_hit  # routes back: the episode ends
    assert h.update(70.0, ["10.0.2.0/24"]) and h.episodes == 2  # a new loss holds again
    assert not h.update(70.5, [])
    assert any("bound of 5 s" in e for e in h.events) and any("released" in e for e in h.events)


def test_a_resumed_tor_is_held_until_its_stale_routes_are_withdrawn_and_relearnt():
    """The hung ToR that resumes: its routes are all there at the resume, but stale."""
    from hpnlab.node.agents.tor import HoldDown

    net = "10.0.2.0/24"
    h = HoldDown(True, 20.0)
    h.resumed(10.0, 3.0, expect_withdraw=True, missing=[])
    assert h.update(10.0, []) and h.held  # nothing missing, yet held: the routes are stale
    h.route(net, present=True)  # a route change before any withdrawal is not a relearn
    assert h.update(10.05, [])
    h.route(net, present=False)  # bgpd flushes the sessions' routes (+95 ms measured)
    assert h.update(10.1, [net])
    h.route(net, present=True)  # the sessions are up again and the route is back
    h.hosts([])  # and every host has its route out of its port
    assert not h.update(10.37, []) and not h.held
    assert h.last_resume == {"stopped_s": 3.0, "held_s": 0.37, "withdrawn": [net], "relearnt": [net],
                             "hosts_waited": []}
    assert h.resumes == 1 and h.episodes == 1 and h.resume is None


def test_a_resumed_tor_is_held_until_it_can_deliver_to_its_hosts_again():
    """The paper's segment: a rail's hosts all sit under one set, so no fabric route is involved; the ToR's
    neighbour entries failed while it was stopped, and with them the host routes made from them."""
    from hpnlab.node.agents.tor import HoldDown

    h = HoldDown(True, 20.0)
    h.resumed(10.0, 12.0, expect_withdraw=False, missing=[])
    assert h.update(10.0, []) and "not checked" in h.events[-1]  # held until the agent has looked
    h.hosts(["10.0.0.2", "10.0.0.3"])
    assert h.update(10.01, [])
    assert h.status(10.01)["resume"]["hosts_unreached"] == ["10.0.0.2", "10.0.0.3"]
    h.hosts(["10.0.0.3"])  # one host answered the ToR's ARP and its route is in
    assert h.update(10.02, [])
    h.hosts([])
    assert not h.update(10.03, []) and not h.held
    assert h.last_resume["hosts_waited"] == ["10.0.0.2", "10.0.0.3"] and h.last_resume["held_s"] == 0.03


def test_a_resumed_tors_hosts_wait_for_its_fabric_routes_first():
    from hpnlab.node.agents.tor import HoldDown

    net = "10.0.2.0/24"
    h = HoldDown(True, 20.0)
    h.resumed(0.0, 3.0, expect_withdraw=True, missing=[net])
    h.hosts([])
    assert h.update(0.1, [net]) and h.resume.bgp_waiting(0.1)  # the hosts are there, the fabric is not
    h.route(net, present=True)
    assert h.resume.bgp_waiting(0.2) is None
    assert not h.update(0.2, [])


def test_a_resume_the_sessions_outlived_is_held_only_for_the_grace_or_not_at_all():
    from hpnlab.node.agents.tor import RESUME_GRACE_S, HoldDown

    h = HoldDown(True, 20.0)
    h.resumed(0.0, 0.5, expect_withdraw=True, missing=[])  # expected a withdrawal that never comes
    h.hosts([])
    assert h.update(RESUME_GRACE_S - 0.01, [])
    assert not h.update(RESUME_GRACE_S, [])  # not the bound's 20 s
    assert any("sessions survived" in e for e in h.events)
    h.resumed(5.0, 0.5, expect_withdraw=False, missing=[])  # stopped for less than the sessions' detection
    h.hosts([])
    assert not h.update(5.0, [])
    h.resumed(9.0, 0.5, expect_withdraw=False, missing=["10.0.2.0/24"])  # ... but a route is missing
    assert h.update(9.0, ["10.0.2.0/24"])


def test_a_resume_hold_is_bounded_and_off_when_the_hold_down_is():
    from hpnlab.node.agents.tor import HoldDown

    h = HoldDown(True, 2.0)
    h.resumed(0.0, 3.0, expect_withdraw=True, missing=["10.0.2.0/24"])  # withdrawn, never relearnt
    assert h.update(1.9, [])
    assert not h.update(2.0, []) and h.bound_hit and h.resume is None
    off = HoldDown(False, 2.0)
    off.resumed(0.0, 3.0, expect_withdraw=True, missing=[])
    assert off.resume is None and not off.update(0.0, [])

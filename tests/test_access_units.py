"""Root-free parts of the access options: micro-BFD (packets checked against scapy's independent BFD
decoder, the RFC 5880 state machine), and the ToR hold-down's and micro-BFD's spec fields."""

from __future__ import annotations

import pytest

from hpnlab.errors import SpecError
from hpnlab.node import microbfd
from hpnlab.spec import parse_spec
from hpnlab.traffic.experiment import node_configs


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
    from hpnlab.node.tor import HoldDown

    h = HoldDown(True, 5.0)
    assert h.update(0.0, ["10.0.2.0/24"]) and h.held
    assert h.update(4.9, ["10.0.2.0/24"])
    assert not h.update(5.0, ["10.0.2.0/24"]) and h.bound_hit  # never kept out longer than the bound
    assert not h.update(60.0, ["10.0.2.0/24"])  # the same episode stays released
    assert not h.update(61.0, []) and not h.bound_hit  # routes back: the episode ends
    assert h.update(70.0, ["10.0.2.0/24"]) and h.episodes == 2  # a new loss holds again
    assert not h.update(70.5, [])
    assert any("bound of 5 s" in e for e in h.events) and any("released" in e for e in h.events)

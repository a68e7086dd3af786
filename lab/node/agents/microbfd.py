"""Micro-BFD (RFC 7130): one BFD session per member link of a LAG, so a member whose far end stops
forwarding leaves the aggregate in interval x multiplier, not in LACP's three seconds.

Packets are RFC 5880 control packets in UDP to port 6784, sent out of one member port as a whole Ethernet
frame to the RFC 7130 MAC 01:00:5e:90:00:01 (never routed, never ARPed for), between the LAG's own
addresses: the host NIC's IP and the ToR's gateway address. They are received by a UDP socket bound to
that member port (SO_BINDTODEVICE), so each session hears only its own link.

Simplifications, stated: asynchronous mode only, no echo, no authentication, no Poll/Final sequence
(the timers are fixed by the spec and equal on both ends), and packets go at the configured interval
in every state (RFC 5880 asks for >= 1 s while not Up; here a session comes up in a few intervals).

The state machine (``Session``) is pure; ``Driver`` moves packets in and out for one agent.
"""

from __future__ import annotations

import random
import socket
import struct
import time
import zlib

from hpnlab.node.inet import checksum
from hpnlab.node.slip import GAPS

PORT = 6784
MAC = "01:00:5e:90:00:01"
ADMIN_DOWN, DOWN, INIT, UP = 0, 1, 2, 3
STATE_NAMES = ("admin_down", "down", "init", "up")
DIAG_NONE, DIAG_DETECT_EXPIRED, DIAG_NEIGHBOR_DOWN = 0, 1, 3
HEADER = struct.Struct("!BBBBIIIII")  # RFC 5880 §4.1, 24 bytes
SO_BINDTODEVICE = 25
SPORT = 49152  # RFC 5881: source port 49152..65535


def encode(state: int, mult: int, my_disc: int, your_disc: int, tx_us: int, rx_us: int,
           diag: int = DIAG_NONE) -> bytes:
    return HEADER.pack((1 << 5) | diag, state << 6, mult, HEADER.size, my_disc, your_disc, tx_us, rx_us, 0)


def decode(data: bytes) -> dict | None:
    """A control packet's fields, or None when it is not a valid version-1 packet (RFC 5880 §6.8.6)."""
    if len(data) < HEADER.size:
        return None
    vd, flags, mult, length, my, your, tx, rx, _echo = HEADER.unpack_from(data)
    if vd >> 5 != 1 or length < HEADER.size or length > len(data) or mult == 0 or my == 0:
        return None
    return {"diag": vd & 0x1F, "state": flags >> 6, "mult": mult, "my_disc": my, "your_disc": your,
            "desired_min_tx_us": tx, "required_min_rx_us": rx}


def frame(src_mac: str, src_ip: str, dst_ip: str, payload: bytes, sport: int = SPORT) -> bytes:
    """Ethernet + IPv4 (TTL 255, RFC 5881's GTSM) + UDP to 6784, checksums filled in."""
    src, dst = socket.inet_aton(src_ip), socket.inet_aton(dst_ip)
    udp_len = 8 + len(payload)
    pseudo = src + dst + struct.pack("!BBH", 0, 17, udp_len)
    udp = struct.pack("!HHHH", sport, PORT, udp_len, 0) + payload
    csum = checksum(pseudo + udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", csum) + udp[8:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0xC0, 20 + udp_len, 0, 0x4000, 255, 17, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    mac = lambda m: bytes(int(x, 16) for x in m.split(":"))  # noqa: E731
    return mac(MAC) + mac(src_mac) + b"\x08\x00" + ip + udp


def discriminator(node: str, iface: str) -> int:
    return zlib.crc32(f"{node}/{iface}".encode()) or 1


class Session:
    """One member link's BFD session (RFC 5880 §6.8.6 state machine, asynchronous mode)."""

    def __init__(self, iface: str, my_disc: int, interval_s: float, mult: int):
        self.iface, self.my_disc, self.interval, self.mult = iface, my_disc, interval_s, mult
        self.state = DOWN
        self.diag = DIAG_NONE
        self.remote_disc = 0
        self.remote_state = DOWN
        self.detect_at: float | None = None
        self.next_tx = 0.0
        self.enabled = False
        self.events: list[str] = []
        self.rx = 0
        self.tx = 0
        self.ups = 0

    def _set(self, state: int, diag: int, why: str) -> None:
        if state != self.state:
            self.events.append(f"{self.iface}: micro-BFD {STATE_NAMES[self.state]} -> {STATE_NAMES[state]} ({why})")
            if state == UP:
                self.ups += 1
            self.state, self.diag = state, diag
            self.next_tx = 0.0  # tell the peer at once

    def set_enabled(self, up: bool, now: float) -> None:
        self.enabled = up
        if not up:
            self.remote_disc = 0
            self.detect_at = None
            self._set(DOWN, DIAG_DETECT_EXPIRED if self.state == UP else self.diag, "carrier down")

    def receive(self, pkt: dict, now: float) -> None:
        if not self.enabled or (pkt["your_disc"] and pkt["your_disc"] != self.my_disc):
            return
        self.rx += 1
        self.remote_disc = pkt["my_disc"]
        self.remote_state = pkt["state"]
        tx = max(self.interval, pkt["desired_min_tx_us"] / 1e6)
        self.detect_at = now + pkt["mult"] * tx
        rs = pkt["state"]
        if rs == ADMIN_DOWN:
            self._set(DOWN, DIAG_NEIGHBOR_DOWN, "neighbour admin down")
        elif self.state == DOWN:
            if rs == DOWN:
                self._set(INIT, DIAG_NONE, "neighbour down")
            elif rs == INIT:
                self._set(UP, DIAG_NONE, "neighbour init")
        elif self.state == INIT:
            if rs in (INIT, UP):
                self._set(UP, DIAG_NONE, f"neighbour {STATE_NAMES[rs]}")
        elif self.state == UP and rs == DOWN:
            self._set(DOWN, DIAG_NEIGHBOR_DOWN, "neighbour signalled down")

    def tick(self, now: float) -> None:
        if self.state in (INIT, UP) and self.detect_at is not None and now >= self.detect_at:
            self.remote_disc = 0
            self.detect_at = None
            self._set(DOWN, DIAG_DETECT_EXPIRED, f"nothing heard for {self.mult} x {self.interval * 1000:g} ms")

    def due(self, now: float) -> bytes | None:
        if not self.enabled or now < self.next_tx:
            return None
        self.next_tx = now + self.interval * random.uniform(0.75, 1.0)  # RFC 5880 §6.8.7 jitter
        self.tx += 1
        us = int(self.interval * 1e6)
        return encode(self.state, self.mult, self.my_disc, self.remote_disc, us, us, self.diag)

    def next_deadline(self) -> float:
        ds = [self.next_tx] if self.enabled else []
        if self.detect_at is not None:
            ds.append(self.detect_at)
        return min(ds) if ds else float("inf")

    @property
    def up(self) -> bool:
        return self.state == UP

    def status(self) -> dict:
        return {"state": STATE_NAMES[self.state], "diag": self.diag, "rx": self.rx, "tx": self.tx, "ups": self.ups}


class Driver:
    """The sessions of one agent: ``links`` is [(iface, src_mac, src_ip, dst_ip)], ``send(iface, frame)``
    puts a whole frame on a port (the agent's packet socket)."""

    def __init__(self, node: str, links: list[tuple[str, str, str, str]], interval_ms: int, mult: int, send):
        self.send = send
        self.links = {ifc: (mac, sip, dip) for ifc, mac, sip, dip in links}
        self.sessions = {ifc: Session(ifc, discriminator(node, ifc), interval_ms / 1000, mult) for ifc in self.links}
        self.socks: dict[int, tuple[socket.socket, str]] = {}
        for ifc in self.links:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, ifc.encode())
            s.bind(("0.0.0.0", PORT))
            s.setblocking(False)
            self.socks[s.fileno()] = (s, ifc)

    def fds(self) -> list[int]:
        return list(self.socks)

    def handle(self, fd: int, now: float) -> None:
        s, ifc = self.socks[fd]
        while True:
            try:
                data = s.recv(512)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            pkt = decode(data)
            if pkt:
                ses = self.sessions[ifc]
                # the slip guard: an interval of half the detection time or more between the peer's packets
                GAPS.seen(f"micro-bfd {ifc}", time.time(), ses.interval * ses.mult / 2)
                ses.receive(pkt, now)

    def set_enabled(self, ifc: str, up: bool, now: float) -> None:
        self.sessions[ifc].set_enabled(up, now)

    def tick_and_send(self, now: float) -> list[str]:
        events = []
        for ifc, ses in self.sessions.items():
            ses.tick(now)
            payload = ses.due(now)
            if payload:
                mac, sip, dip = self.links[ifc]
                self.send(ifc, frame(mac, sip, dip, payload))
            events += ses.events
            ses.events.clear()
        return events

    def up(self, ifc: str) -> bool:
        return self.sessions[ifc].up

    def next_deadline(self) -> float:
        return min((s.next_deadline() for s in self.sessions.values()), default=float("inf"))

    def status(self) -> dict:
        return {ifc: s.status() for ifc, s in self.sessions.items()}

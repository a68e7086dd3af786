"""A small 802.1AX LACP speaker: PDU codec and per-port receive / periodic / mux machines.

Pure (time is passed in), so it is unit-tested without sockets. No scapy here: it would cost the
agents ~80 MB each; tests decode our frames with scapy's independent LACP layer instead.

Deviation from the standard, on purpose (HPN/DESIGN): when the partner EXPIRES the port is
unselected at once, so our Sync clears and the partner stops distributing after ~3 s instead of
waiting for DEFAULTED (~5.4 s).
"""

from __future__ import annotations

import heapq
import struct
from dataclasses import dataclass, field

SLOW_PROTOCOLS_MAC = bytes.fromhex("0180c2000002")
ETH_P_SLOW = 0x8809
FAST_PERIOD, SLOW_PERIOD = 1.0, 30.0
SHORT_TIMEOUT, LONG_TIMEOUT = 3.0, 90.0

ACTIVITY, TIMEOUT, AGGREGATION, SYNC, COLLECTING, DISTRIBUTING, DEFAULTED, EXPIRED = (1 << i for i in range(8))
STATE_NAMES = ["activity", "short_timeout", "aggregation", "sync", "collecting", "distributing", "defaulted",
               "expired"]

_INFO = struct.Struct("!BBH6sHHHB3x")  # TLV type, len, sys prio, sys, key, port prio, port, state
_HEAD = struct.Struct("!6s6sHBB")  # dst, src, ethertype, subtype, version


def mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def mac_str(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


@dataclass(frozen=True)
class Info:
    """Actor or partner information as carried in a LACPDU."""

    sys_prio: int = 0
    system: str = "00:00:00:00:00:00"
    key: int = 0
    port_prio: int = 0
    port: int = 0
    state: int = 0

    def ident(self) -> tuple:
        return (self.sys_prio, self.system, self.key, self.port_prio, self.port)

    def link_agg_id(self) -> tuple:
        """What must be equal for two ports to aggregate: the partner system and key."""
        return (self.sys_prio, self.system, self.key)


def encode(src_mac: str, actor: Info, partner: Info) -> bytes:
    out = bytearray(_HEAD.pack(SLOW_PROTOCOLS_MAC, mac_bytes(src_mac), ETH_P_SLOW, 1, 1))
    for tlv, i in ((1, actor), (2, partner)):
        out += _INFO.pack(tlv, 20, i.sys_prio, mac_bytes(i.system), i.key, i.port_prio, i.port, i.state)
    out += struct.pack("!BBH12x", 3, 16, 0)  # collector, max delay 0
    out += bytes(2 + 50)  # terminator + reserved
    return bytes(out)


def decode(frame: bytes) -> tuple[Info, Info] | None:
    """(actor, partner) from an Ethernet frame, or None if it is not a well-formed LACPDU."""
    if len(frame) < _HEAD.size + 2 * _INFO.size:
        return None
    _dst, _src, etype, subtype, _ver = _HEAD.unpack_from(frame)
    if etype != ETH_P_SLOW or subtype != 1:
        return None
    infos = []
    for n, off in enumerate((_HEAD.size, _HEAD.size + _INFO.size)):
        tlv, ln, sp, sysb, key, pp, port, st = _INFO.unpack_from(frame, off)
        if tlv != n + 1 or ln != 20:
            return None
        infos.append(Info(sp, mac_str(sysb), key, pp, port, st))
    return infos[0], infos[1]


def state_flags(state: int) -> list[str]:
    return [name for i, name in enumerate(STATE_NAMES) if state & (1 << i)]


@dataclass
class Port:
    """One LACP port: receive, periodic-transmit and mux machines (coupled control)."""

    iface: str
    mac: str
    system: str
    key: int
    port: int
    sys_prio: int = 65535
    port_prio: int = 255
    fast: bool = True
    scale: float = 1.0  # every period and timeout times this (spec time_dilation); the PDU's bits are unchanged
    enabled: bool = False  # carrier up
    rx: str = "disabled"  # disabled | expired | defaulted | current
    mux: str = "detached"  # detached | attached | collecting_distributing
    selected: bool = False
    partner: Info | None = None
    partner_sync: bool = False
    actor_state: int = 0
    current_while: float = 0.0
    next_tx: float = 0.0
    ntt: bool = False
    events: list[str] = field(default_factory=list)  # human-readable transitions since last drain
    last_rx: float | None = None
    rx_count: int = 0
    tx_count: int = 0

    def __post_init__(self) -> None:
        self.actor_state = ACTIVITY | AGGREGATION | (TIMEOUT if self.fast else 0)

    # --- views ---------------------------------------------------------------------------------
    def actor(self) -> Info:
        st = self.actor_state
        if self.rx == "defaulted":
            st |= DEFAULTED
        if self.rx == "expired":
            st |= EXPIRED
        return Info(self.sys_prio, self.system, self.key, self.port_prio, self.port, st)

    def partner_view(self) -> Info:
        return self.partner or Info()

    @property
    def distributing(self) -> bool:
        return self.mux == "collecting_distributing"

    def _timeout(self) -> float:
        return (SHORT_TIMEOUT if self.actor_state & TIMEOUT else LONG_TIMEOUT) * self.scale

    def timeout(self) -> float:
        """How long this port waits for its partner's next PDU before it expires (s, dilated)."""
        return self._timeout()

    def _log(self, msg: str) -> None:
        self.events.append(f"{self.iface}: {msg}")

    # --- inputs ------------------------------------------------------------------------------
    def set_enabled(self, up: bool, now: float) -> None:
        if up == self.enabled:
            return
        self.enabled = up
        if up:
            self.rx = "expired"  # PORT_DISABLED -> EXPIRED: wait one short timeout for the partner
            self.current_while = now + SHORT_TIMEOUT * self.scale
            self.partner_sync = False
            self.ntt = True
            self._log("carrier up")
        else:
            self.rx = "disabled"
            self.partner = None
            self.partner_sync = False
            self.selected = False
            self._log("carrier down")
        self._mux(now)

    def receive(self, actor: Info, partner: Info, now: float) -> None:
        if not self.enabled:
            return
        self.rx_count += 1
        self.last_rx = now
        old = self.partner
        mine = self.actor()
        if old is None or old.ident() != actor.ident():
            self.selected = False  # partner changed: re-run selection
            self._log(f"partner {actor.system} key {actor.key} port {actor.port}")
        self.partner = actor
        matches = partner.ident() == mine.ident() and bool(partner.state & AGGREGATION) == bool(
            mine.state & AGGREGATION)
        self.partner_sync = bool(actor.state & SYNC) and matches
        if not matches or (partner.state & (SYNC | COLLECTING | DISTRIBUTING)) != (
                mine.state & (SYNC | COLLECTING | DISTRIBUTING)):
            self.ntt = True  # the partner's view of us is stale
        if self.rx != "current":
            self._log("partner current")
        self.rx = "current"
        self.current_while = now + self._timeout()
        self._mux(now)

    def tick(self, now: float) -> None:
        if self.enabled and self.rx in ("current", "expired") and now >= self.current_while:
            if self.rx == "current":
                self.rx = "expired"
                self.partner_sync = False
                self.selected = False  # HPN: clear our Sync on EXPIRED, not only on DEFAULTED
                self.current_while = now + SHORT_TIMEOUT * self.scale
                self.ntt = True
                self._log("partner expired")
            else:
                self.rx = "defaulted"
                self.partner = None
                self.selected = False
                self.ntt = True
                self._log("partner defaulted")
        self._mux(now)

    def _mux(self, now: float) -> None:
        before = self.mux
        if self.mux == "detached" and self.selected:
            self.mux = "attached"
            self.actor_state |= SYNC
        if self.mux == "attached":
            if not self.selected:
                self.mux = "detached"
                self.actor_state &= ~SYNC
            elif self.partner_sync:
                self.mux = "collecting_distributing"
                self.actor_state |= COLLECTING | DISTRIBUTING
        elif self.mux == "collecting_distributing" and (not self.selected or not self.partner_sync):
            self.mux = "attached"
            self.actor_state &= ~(COLLECTING | DISTRIBUTING)
            if not self.selected:
                self.mux = "detached"
                self.actor_state &= ~SYNC
        if self.mux != before:
            self.ntt = True
            self._log(f"mux {before} -> {self.mux}")

    def period(self) -> float:
        p = self.partner
        short = p is None or self.rx != "current" or bool(p.state & TIMEOUT)
        return (FAST_PERIOD if short else SLOW_PERIOD) * self.scale

    def due(self, now: float) -> bytes | None:
        """The frame to send now, if any (NTT or periodic)."""
        if not self.enabled:
            return None
        if now >= self.next_tx:
            self.ntt = True
        if not self.ntt:
            return None
        self.ntt = False
        self.next_tx = now + self.period()
        self.tx_count += 1
        return encode(self.mac, self.actor(), self.partner_view())

    def next_deadline(self) -> float:
        ds = [self.next_tx]
        if self.enabled and self.rx in ("current", "expired"):
            ds.append(self.current_while)
        return min(ds)

    def status(self, now: float) -> dict:
        p = self.partner
        return {"iface": self.iface, "enabled": self.enabled, "rx": self.rx, "mux": self.mux,
                "selected": self.selected, "actor": {"system": self.system, "key": self.key, "port": self.port,
                                                     "state": state_flags(self.actor().state)},
                "partner": None if p is None else {"system": p.system, "key": p.key, "port": p.port,
                                                   "state": state_flags(p.state)},
                "rx_count": self.rx_count, "tx_count": self.tx_count,
                "last_rx_age": None if self.last_rx is None else round(now - self.last_rx, 3)}


def select(ports: list[Port]) -> None:
    """Aggregator selection for ports that must form ONE aggregate (a host NIC's two ports).

    The aggregate's partner is the one the most current ports agree on (ties: the lowest port);
    ports with another partner stay unselected (standby), as a real bond does with two systems.
    """
    live = [p for p in ports if p.rx == "current" and p.partner is not None
            and p.partner.state & AGGREGATION]
    if not live:
        for p in ports:
            p.selected = False
        return
    votes: dict[tuple, int] = {}
    for p in live:
        votes[p.partner.link_agg_id()] = votes.get(p.partner.link_agg_id(), 0) + 1
    best = max(votes, key=lambda k: (votes[k], -min(p.port for p in live if p.partner.link_agg_id() == k)))
    for p in ports:
        p.selected = p in live and p.partner.link_agg_id() == best


def select_individual(ports: list[Port]) -> None:
    """ToR side: every host-facing port is its own aggregate (one per host NIC)."""
    for p in ports:
        p.selected = p.rx == "current" and p.partner is not None


class Timers:
    """Which of an agent's ports need a step: those touched since the last one (a PDU received, a carrier
    change: the agent says so) and those whose timer is due, from one heap of every port's timers (a timer
    wheel). Pure, like the machines: time is passed in.

    Why not every port at every wake-up: with LACP fast a ToR of the paper's segment (128 host ports) wakes
    ~256 times a second (a PDU in from each host, one out to each), and stepping, selecting, transmitting
    and finding the next deadline over all 128 ports took ~0.1 ms each time. A port neither touched nor due
    is at a fixed point of its machines (one step runs them to one, and only a PDU, a carrier change or its
    own timers move it), so stepping it changes nothing.

    A periodic PDU due within ``slack`` goes out with the step at hand, on its own schedule (``send_time``:
    ``Port.due`` at the port's own ``next_tx``, so the next one is a period after that), so the sends of many
    ports share a wake-up. A timeout is never taken early."""

    def __init__(self, ports: list[Port], slack: float = 0.05):
        self.ports, self.slack = ports, slack
        self.by_iface = {p.iface: p for p in ports}
        self.touched: dict[str, Port] = dict(self.by_iface)  # the first step takes every port
        self.heap: list[tuple[float, int, str, str]] = []  # (when, seq, "tx" | "rx", iface)
        self.scheduled: dict[str, tuple[float, float | None]] = {}  # iface -> (next_tx, current_while) in it
        self.seq = 0

    def touch(self, port: Port) -> None:
        self.touched[port.iface] = port

    @staticmethod
    def _rx_timer(p: Port) -> float | None:
        return p.current_while if p.enabled and p.rx in ("current", "expired") else None

    def _valid(self, kind: str, when: float, p: Port) -> bool:
        """Still the port's timer (else the port was rescheduled since, or lost its carrier)."""
        return p.enabled and (when == p.next_tx if kind == "tx" else when == self._rx_timer(p))

    def due(self, now: float) -> list[Port]:
        """The ports to step now, in port order; each must then be passed to ``schedule``."""
        due, self.touched = self.touched, {}
        later = []
        while self.heap and self.heap[0][0] <= now + self.slack:
            entry = heapq.heappop(self.heap)
            when, _, kind, iface = entry
            p = self.by_iface[iface]
            if not self._valid(kind, when, p):
                continue
            if kind == "rx" and when > now:
                later.append(entry)
            else:
                due[iface] = p
        for entry in later:
            heapq.heappush(self.heap, entry)
        if len(due) == len(self.ports):
            return self.ports
        return [p for p in self.ports if p.iface in due] if len(due) > 1 else list(due.values())

    def send_time(self, p: Port, now: float) -> float:
        """The time to pass ``p.due``: its own ``next_tx`` when that is within the slack, else now."""
        return p.next_tx if now < p.next_tx <= now + self.slack else now

    def schedule(self, p: Port) -> None:
        """Put a stepped port's timers on the heap (those that changed)."""
        if not p.enabled:
            self.scheduled.pop(p.iface, None)
            return
        want = (p.next_tx, self._rx_timer(p))
        have = self.scheduled.get(p.iface)
        if want == have:
            return
        self.scheduled[p.iface] = want
        if have is None or want[0] != have[0]:
            self.seq += 1
            heapq.heappush(self.heap, (want[0], self.seq, "tx", p.iface))
        if want[1] is not None and (have is None or want[1] != have[1]):
            self.seq += 1
            heapq.heappush(self.heap, (want[1], self.seq, "rx", p.iface))

    def next_deadline(self, now: float) -> float:
        """When a port is next due: now if one was touched; now + 1 s with no timer at all."""
        if self.touched:
            return now
        while self.heap and not self._valid(self.heap[0][2], self.heap[0][0], self.by_iface[self.heap[0][3]]):
            heapq.heappop(self.heap)
        return self.heap[0][0] if self.heap else now + 1.0

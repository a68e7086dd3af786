"""The stacked dual-ToR baseline (paper §4.1, Fig. 8a: vPC / M-LAG), as the pair's agents run it.

The two ToRs of a set are joined by a peer link and an out-of-band link. Over the peer link each sends
its learned neighbours (ip -> host) every 100 ms: the synchronisation of ARP state that a stacked pair
depends on; the peer link is a data-plane port, so it is also what a dead data plane takes down. Over
the out-of-band link each sends a heartbeat. ToR a is the primary, ToR b the secondary. The rule of
§4.1: when the secondary hears the primary's heartbeat (its control plane is alive) but no longer its
sync (the peer link's data path is gone), it cannot tell whose forwarding is right and shuts its host
ports to avoid inconsistent forwarding. When the heartbeat is gone too, the primary is dead and the
secondary carries on alone. When the sync comes back, it opens its ports again.

Frames: Ethernet, ethertype 0x88B5 (IEEE local experimental), a small JSON body. ``Pair`` is the pure
decision; ``PairLink`` the sockets.
"""

from __future__ import annotations

import json
import socket

ETHERTYPE = 0x88B5
PERIOD = 0.1


class Pair:
    """One ToR's view of its stacked pair."""

    def __init__(self, node: str, role: str, sync_timeout: float, heartbeat_timeout: float, now: float):
        self.node, self.role = node, role
        self.sync_timeout, self.hb_timeout = sync_timeout, heartbeat_timeout
        self.last_sync = now  # a grace period at start: the peer may boot a little later
        self.last_hb = now
        self.peer_neigh: dict[str, str] = {}  # ip -> host name, as the peer learned them
        self.shut = False
        self.events: list[str] = []
        self.next_tx = 0.0

    def heard(self, kind: str, body: dict, now: float) -> None:
        if kind == "hb":
            self.last_hb = now
        elif kind == "sync":
            self.last_sync = now
            self.peer_neigh = {str(k): str(v) for k, v in (body.get("neigh") or {}).items()}

    def sync_ok(self, now: float) -> bool:
        return now - self.last_sync < self.sync_timeout

    def peer_alive(self, now: float) -> bool:
        return now - self.last_hb < self.hb_timeout

    def decide(self, now: float) -> bool:
        """Whether this ToR's host ports must be shut now (only a secondary ever shuts)."""
        want = self.role == "secondary" and not self.sync_ok(now) and self.peer_alive(now)
        if want != self.shut:
            self.events.append(
                "stack: sync over the peer link lost while the primary is alive on the out-of-band link: "
                "shutting the host ports (secondary)" if want else
                "stack: " + ("sync back" if self.sync_ok(now) else "primary silent on the out-of-band link too: "
                             "carrying on alone") + ", host ports up")
            self.shut = want
        if not self.sync_ok(now):
            self.peer_neigh = {}  # stale: never install what the peer no longer confirms
        return self.shut

    def status(self, now: float) -> dict:
        return {"role": self.role, "sync_ok": self.sync_ok(now), "peer_alive": self.peer_alive(now),
                "shut": self.shut, "sync_age": round(now - self.last_sync, 3), "hb_age": round(now - self.last_hb, 3),
                "peer_neighbours": len(self.peer_neigh)}


def encode(src_mac: str, kind: str, node: str, body: dict | None = None) -> bytes:
    mac = bytes(int(x, 16) for x in src_mac.split(":"))
    payload = json.dumps({"t": kind, "from": node, **(body or {})}, separators=(",", ":")).encode()
    return b"\xff" * 6 + mac + ETHERTYPE.to_bytes(2, "big") + payload


def decode(frame: bytes) -> tuple[str, dict] | None:
    if len(frame) < 15 or int.from_bytes(frame[12:14], "big") != ETHERTYPE:
        return None
    try:
        body = json.loads(frame[14:].rstrip(b"\0"))
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("t") not in ("hb", "sync"):
        return None
    return body["t"], body


class PairLink:
    """The packet sockets on the peer link and the out-of-band link."""

    def __init__(self, peer_iface: str = "peer", oob_iface: str = "oob"):
        self.ifaces = {"sync": peer_iface, "hb": oob_iface}
        self.socks: dict[int, tuple[socket.socket, str]] = {}
        self.tx: dict[str, socket.socket] = {}
        for kind, ifc in self.ifaces.items():
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETHERTYPE))
            s.bind((ifc, ETHERTYPE))
            s.setblocking(False)
            self.socks[s.fileno()] = (s, kind)
            self.tx[kind] = s
        self.macs = {kind: open(f"/sys/class/net/{ifc}/address").read().strip() for kind, ifc in self.ifaces.items()}

    def fds(self) -> list[int]:
        return list(self.socks)

    def handle(self, fd: int, pair: Pair, now: float) -> None:
        s, kind = self.socks[fd]
        while True:
            try:
                frame = s.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            got = decode(frame)
            if got and got[0] == kind:  # a heartbeat counts only on the out-of-band link, sync on the peer link
                pair.heard(got[0], got[1], now)

    def send(self, pair: Pair, neigh: dict[str, str], now: float) -> None:
        if now < pair.next_tx:
            return
        pair.next_tx = now + PERIOD
        for kind, body in (("hb", None), ("sync", {"neigh": neigh})):
            try:
                self.tx[kind].send(encode(self.macs[kind], kind, pair.node, body))
            except OSError:
                pass  # link down: the peer notices the silence

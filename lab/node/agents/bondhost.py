"""Host agent for a host on the kernel's 802.3ad bond (``host_driver: bond``, kernels with bonding).

The kernel speaks LACP and owns the NIC's routes; what is left of HPN's host side is the host making
itself known: every second, per NIC, an ARP request for its gateway through the bond. The ARP
duplication ruleset on the bond's members (hpnlab.node.plan.nft_ruleset) sends it out of both ports, so
both ToRs of the set learn the host and keep its /32 (without the ruleset: one ToR only, as in a host
without HPN's ARP broadcast module). Why an agent at all: a bonded host that does not talk is unknown
to its ToRs (the kernel sends ARP only for traffic, and the bond sends no peer notification in 802.3ad
mode), so its /32s never appeared until the first flow; and a silent host's entries age out of a large
lab's neighbour table. The userspace host agent re-announces the same way.

It also writes the bonds' state (/proc/net/bonding) as its heartbeat, for ``status`` and ``verify``.

Run inside the host's namespace: ``python -m hpnlab.node.agents.bondhost NODE_JSON [--status FILE]``.
"""

from __future__ import annotations

import socket
import time

from hpnlab.node.agents.agent import StatusFile, agent_main, arp_request, log
from hpnlab.node.plan import bond_name

ANNOUNCE_S = 1.0
ETH_P_ALL = 0x0003


def parse_bonding(text: str) -> list[dict]:
    """Per-slave partner details from /proc/net/bonding/<bond> (802.3ad mode)."""
    slaves: list[dict] = []
    cur: dict | None = None
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Slave Interface:"):
            cur = {"slave": line.split(":", 1)[1].strip()}
            slaves.append(cur)
            section = ""
        elif cur is None:
            continue
        elif line.startswith("details partner lacp pdu"):
            section = "partner"
        elif line.startswith("details actor lacp pdu"):
            section = "actor"
        elif line.startswith("Aggregator ID:"):
            cur["aggregator"] = int(line.split(":", 1)[1])
        elif line.startswith("MII Status:"):
            cur["mii"] = line.split(":", 1)[1].strip()
        elif section == "partner" and line.startswith("system mac address:"):
            cur["partner_system"] = line.split(":", 1)[1].strip().lower()
        elif section == "partner" and line.startswith("port number:"):
            cur["partner_port"] = int(line.split(":", 1)[1])
        elif section == "partner" and line.startswith("oper key:"):
            cur["partner_key"] = int(line.split(":", 1)[1])
        elif section in ("actor", "partner") and line.startswith("port state:"):
            cur[f"{section}_state"] = int(line.split(":", 1)[1])
    return slaves


COLLECTING_DISTRIBUTING = 0x30  # LACP port state bits 4 and 5


def port_view(s: dict) -> dict:
    """A bond member in the shape the userspace agent reports its ports (``status``, ``verify``)."""
    cd = s.get("mii") == "up" and (s.get("actor_state", 0) & COLLECTING_DISTRIBUTING) == COLLECTING_DISTRIBUTING
    partner = ({"system": s["partner_system"], "key": s.get("partner_key"), "port": s.get("partner_port")}
               if s.get("partner_system") not in (None, "00:00:00:00:00:00") else None)
    return {"iface": s["slave"], "mux": "collecting_distributing" if cd else "detached", "partner": partner,
            "rx": None, "aggregator": s.get("aggregator")}


def bond_state(bond: str) -> list[dict]:
    try:
        with open(f"/proc/net/bonding/{bond}") as f:
            return parse_bonding(f.read())
    except OSError:
        return []


class BondHostAgent:
    def __init__(self, cfg: dict, status: str | None):
        self.cfg = cfg
        self.nics = cfg["nics"]
        self.bonds = [bond_name(n["rail"]) for n in self.nics]
        self.socks: dict[str, socket.socket] = {}
        self.frames = {b: arp_request(n["mac"], n["ip"], n["gateway"]) for b, n in zip(self.bonds, self.nics)}
        self.status = StatusFile(status)
        self.sent = 0

    def _sock(self, bond: str) -> socket.socket | None:
        if bond not in self.socks:
            try:
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
                s.bind((bond, 0))
                self.socks[bond] = s
            except OSError as e:
                log(f"{bond}: no packet socket yet ({e})")
                return None
        return self.socks[bond]

    def announce(self) -> None:
        for bond in self.bonds:
            s = self._sock(bond)
            if s is None:
                continue
            try:
                s.send(self.frames[bond])  # through the bond: it picks a member, nftables copies to the other
                self.sent += 1
            except OSError:
                pass  # no member in the aggregator yet (bond carrier down): next second

    def snapshot(self) -> dict:
        return {"node": self.cfg["name"], "role": "host", "driver": "bond", "announcements": self.sent,
                "nics": [self._nic(b, n) for b, n in zip(self.bonds, self.nics)]}

    @staticmethod
    def _nic(bond: str, nic: dict) -> dict:
        ports = [port_view(s) for s in bond_state(bond)]
        return {"rail": nic["rail"], "ip": nic["ip"], "bond": bond, "ports": ports,
                "nexthops": [p["iface"] for p in ports if p["mux"] == "collecting_distributing"]}

    def run(self) -> None:
        log(f"bond host agent up: {len(self.nics)} bonds ({', '.join(self.bonds)}); the kernel speaks LACP")
        while True:
            self.announce()
            self.status.write(self.snapshot())
            time.sleep(ANNOUNCE_S)

    def stop(self) -> None:
        log("stopping")


def main(argv: list[str] | None = None) -> int:
    return agent_main(BondHostAgent, __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())

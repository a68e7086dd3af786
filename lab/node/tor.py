"""ToR agent: LACP as one half of a virtual system, and ARP entries -> /32 host routes in table 10.

A neighbour learned on a host port becomes ``<ip>/32 dev <port>`` in the import table while the port
has carrier and (with LACP on) is Collecting/Distributing; zebra imports the table and bgpd advertises
it. The ARP proxy itself is the kernel's (proxy_arp, proxy_delay 0), set up with the node.

Run inside the ToR's namespace: ``python -m hpnlab.node.tor NODE_JSON [--status FILE]``.
"""

from __future__ import annotations

import ipaddress
import socket
import time

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from hpnlab.node import lacp
from hpnlab.node.agent import (RTM_DELLINK, RTM_DELNEIGH, RTM_NEWLINK, RTM_NEWNEIGH, RTMGRP_LINK, RTMGRP_NEIGH,
                               agent_main, LacpDriver, StatusFile, carrier, iface_mac, log, nl_messages,
                               parse_neigh, rtnl_socket, wait)

NUD_INCOMPLETE, NUD_FAILED = 0x01, 0x20
PROTO_HPNLAB = 99  # route protocol id marking our table-10 routes (rt_protos: unassigned)
RT_SCOPE_LINK = 253
NEIGH_RESYNC = 5.0


class TorAgent:
    def __init__(self, cfg: dict, status: str | None):
        self.cfg = cfg
        self.mech = cfg["mechanisms"]
        self.table = cfg["table"]
        self.subnet = ipaddress.IPv4Network(cfg["subnet"])
        self.gateway = cfg["gateway"]
        lc = cfg["lacp"]
        self.ports = [lacp.Port(hp["iface"], iface_mac(hp["iface"]), lc["system_mac"], lc["key"], hp["port_id"],
                                sys_prio=lc["system_priority"], fast=lc["fast_rate"]) for hp in cfg["host_ports"]]
        self.by_iface = {p.iface: p for p in self.ports}
        self.driver = LacpDriver(self.ports, self.mech["lacp"])
        self.ipr = IPRoute()  # dumps and route changes
        self.nl = rtnl_socket(RTMGRP_LINK | RTMGRP_NEIGH)  # bound before the first dump: no early ARP is missed
        self.ifindex = {p.iface: socket.if_nametoindex(p.iface) for p in self.ports}
        self.ifname = {v: k for k, v in self.ifindex.items()}
        self.neigh: dict[str, str] = {}  # ip -> iface, valid entries on host ports
        self.installed: dict[str, str] = {}  # ip -> iface in table 10
        self.status = StatusFile(status)
        self.changes = 0

    # --- state -----------------------------------------------------------------------------------
    def port_ok(self, iface: str) -> bool:
        p = self.by_iface[iface]
        return p.enabled and (p.distributing if self.mech["lacp"] else True)

    def _neigh(self, ifindex: int, state: int, dst: str | None, deleted: bool) -> None:
        iface = self.ifname.get(ifindex)
        if not iface or not dst or ":" in dst or ipaddress.IPv4Address(dst) not in self.subnet:
            return
        if deleted or state & (NUD_FAILED | NUD_INCOMPLETE):
            if self.neigh.get(dst) == iface:
                del self.neigh[dst]
        else:
            self.neigh[dst] = iface

    def _netlink(self, now: float) -> None:
        msgs, overrun = nl_messages(self.nl)
        if overrun:  # the kernel dropped events: re-read everything
            self.resync(now)
            return
        links = False
        for mtype, payload in msgs:
            if mtype in (RTM_NEWNEIGH, RTM_DELNEIGH):
                self._neigh(*parse_neigh(payload), deleted=mtype == RTM_DELNEIGH)
            elif mtype in (RTM_NEWLINK, RTM_DELLINK):
                links = True
        if links:
            self.read_carriers(now)

    def read_carriers(self, now: float) -> None:
        """Carrier as it is now, for every host port (a handful of sysfs reads)."""
        for p in self.ports:
            p.set_enabled(carrier(p.iface), now)

    def resync(self, now: float) -> None:
        self.read_carriers(now)
        self.resync_neighbours()

    def resync_neighbours(self) -> None:
        self.neigh.clear()
        for m in self.ipr.get_neighbours(family=socket.AF_INET):
            self._neigh(m["ifindex"], m["state"], m.get_attr("NDA_DST"), deleted=False)

    # --- routes ----------------------------------------------------------------------------------
    def reconcile(self) -> None:
        # Always installed: this is the ToR's own host table. mechanisms.host_routes only decides
        # whether FRR imports and advertises it (the frr.conf template).
        want = {ip: ifc for ip, ifc in self.neigh.items() if self.port_ok(ifc)}
        for ip, ifc in list(self.installed.items()):
            if want.get(ip) != ifc:
                self._remove(ip)
        for ip, ifc in want.items():
            if self.installed.get(ip) != ifc:
                try:
                    self.ipr.route("replace", dst=f"{ip}/32", oif=self.ifindex[ifc], table=self.table,
                                   scope=RT_SCOPE_LINK, proto=PROTO_HPNLAB)
                    self.installed[ip] = ifc
                    self.changes += 1
                    log(f"host route {ip}/32 dev {ifc} table {self.table} added")
                except NetlinkError as e:
                    log(f"host route {ip}/32 dev {ifc}: {e}")

    def _remove(self, ip: str) -> None:
        # FRR 8.4: if the route already vanished with its port (admin down) the kernel sends no delete and
        # zebra keeps advertising its imported copy. Re-adding as blackhole and deleting forces a delete.
        try:
            self.ipr.route("replace", dst=f"{ip}/32", table=self.table, type="blackhole", proto=PROTO_HPNLAB)
            self.ipr.route("del", dst=f"{ip}/32", table=self.table)
        except NetlinkError as e:
            log(f"host route {ip}/32 removal: {e}")
        ifc = self.installed.pop(ip, None)
        self.changes += 1
        log(f"host route {ip}/32 dev {ifc} table {self.table} withdrawn")

    def flush(self) -> None:
        for ip in list(self.installed):
            self._remove(ip)

    # --- loop ------------------------------------------------------------------------------------
    def snapshot(self, now: float) -> dict:
        return {"node": self.cfg["name"], "role": "tor", "ports": [p.status(now) for p in self.ports],
                "host_routes": dict(sorted(self.installed.items())), "neighbours": dict(sorted(self.neigh.items())),
                "changes": self.changes, "mechanisms": self.mech}

    def run(self) -> None:
        now = time.monotonic()
        self.resync(now)
        nl = self.nl.fileno()
        last_status = last_resync = now
        log(f"tor agent up: {len(self.ports)} host ports, lacp={'on' if self.mech['lacp'] else 'off'}, "
            f"system {self.ports[0].system if self.ports else '-'}")
        while True:
            for fd in wait(self.driver.fds() + [nl], self.driver.next_deadline(now)):
                now = time.monotonic()
                if fd == nl:
                    self._netlink(now)
                else:
                    self.driver.handle(fd, now)
            now = time.monotonic()
            lacp.select_individual(self.ports)
            for p in self.ports:
                p.tick(now)
                for e in p.events:
                    log(e)
                p.events.clear()
            self.driver.transmit(now)
            before = self.changes
            self.reconcile()
            if self.changes != before or now - last_status >= 1.0:
                if now - last_status >= 1.0:  # safety net for a missed link event
                    self.read_carriers(now)
                if now - last_resync >= NEIGH_RESYNC:  # safety net: the kernel's table is the truth
                    self.resync_neighbours()
                    self.reconcile()
                    last_resync = now
                self.status.write(self.snapshot(now))
                last_status = now

    def stop(self) -> None:
        log("stopping: withdrawing host routes")
        self.flush()


def main(argv: list[str] | None = None) -> int:
    return agent_main(TorAgent, __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""ToR agent: LACP as one half of a virtual system, and ARP entries -> /32 host routes in table 10.

A neighbour learned on a host port becomes ``<ip>/32 dev <port>`` in the import table while the port
has carrier and (with LACP on) is Collecting/Distributing; zebra imports the table and bgpd advertises
it. The ARP proxy itself is the kernel's (proxy_arp, proxy_delay 0), set up with the node.

Run inside the ToR's namespace: ``python -m lab.agents.tor NODE_JSON [--status FILE]``.
"""

from __future__ import annotations

import ipaddress
import os
import queue
import socket
import threading
import time

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from lab.agents import lacp
from lab.agents.common import agent_main, LacpDriver, StatusFile, carrier, iface_mac, log, wait

RTMGRP_LINK, RTMGRP_NEIGH = 0x1, 0x4
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
        self.ipr = IPRoute()  # dumps and route changes, main thread only
        self.events: queue.Queue = queue.Queue()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        self.bound = threading.Event()
        threading.Thread(target=self._monitor, daemon=True).start()
        if not self.bound.wait(10):
            raise SystemExit("netlink monitor did not start")
        self.ifindex = {p.iface: socket.if_nametoindex(p.iface) for p in self.ports}
        self.ifname = {v: k for k, v in self.ifindex.items()}
        self.neigh: dict[str, str] = {}  # ip -> iface, valid entries on host ports
        self.installed: dict[str, str] = {}  # ip -> iface in table 10
        self.status = StatusFile(status)
        self.changes = 0

    def _monitor(self) -> None:
        """pyroute2's get() blocks and buffers internally, so select() on its fd is not a reliable
        readiness signal: read events in a thread and wake the main loop through a pipe."""
        mon = IPRoute()
        mon.bind(groups=RTMGRP_LINK | RTMGRP_NEIGH)
        self.bound.set()  # the first dump must follow this, or early ARPs are missed
        while True:
            for m in mon.get():
                self.events.put(m)
            os.write(self.wake_w, b"x")

    # --- state -----------------------------------------------------------------------------------
    def port_ok(self, iface: str) -> bool:
        p = self.by_iface[iface]
        return p.enabled and (p.distributing if self.mech["lacp"] else True)

    def _neigh_msg(self, m) -> None:
        dst = m.get_attr("NDA_DST")
        iface = self.ifname.get(m["ifindex"])
        if not iface or not dst or ":" in dst or ipaddress.IPv4Address(dst) not in self.subnet:
            return
        if m["event"] == "RTM_DELNEIGH" or m["state"] & (NUD_FAILED | NUD_INCOMPLETE):
            if self.neigh.get(dst) == iface:
                del self.neigh[dst]
        else:
            self.neigh[dst] = iface

    def _link_msg(self, m, now: float) -> None:
        iface = m.get_attr("IFLA_IFNAME")
        if iface in self.by_iface:
            self.by_iface[iface].set_enabled(carrier(iface), now)

    def resync(self, now: float) -> None:
        for p in self.ports:
            p.set_enabled(carrier(p.iface), now)
        self.resync_neighbours()

    def resync_neighbours(self) -> None:
        self.neigh.clear()
        for m in self.ipr.get_neighbours(family=socket.AF_INET):
            m["event"] = "RTM_NEWNEIGH"
            self._neigh_msg(m)

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
        nl = self.wake_r
        last_status = last_resync = now
        log(f"tor agent up: {len(self.ports)} host ports, lacp={'on' if self.mech['lacp'] else 'off'}, "
            f"system {self.ports[0].system if self.ports else '-'}")
        while True:
            for fd in wait(self.driver.fds() + [nl], self.driver.next_deadline(now)):
                now = time.monotonic()
                if fd == nl:
                    try:
                        while os.read(nl, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    while not self.events.empty():
                        m = self.events.get_nowait()
                        ev = m.get("event", "")
                        if ev in ("RTM_NEWNEIGH", "RTM_DELNEIGH"):
                            self._neigh_msg(m)
                        elif ev in ("RTM_NEWLINK", "RTM_DELLINK"):
                            self._link_msg(m, now)
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
                    for p in self.ports:
                        p.set_enabled(carrier(p.iface), now)
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

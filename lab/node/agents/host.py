"""Host agent: the NIC side of non-stacked dual-ToR without kernel bonding.

Per rail NIC: an LACP speaker on both ports (actor system = the NIC's MAC), and kernel ECMP routes
with one nexthop per port that is Collecting/Distributing with the common partner (with LACP off:
per port with carrier, i.e. static ECMP). The ARP duplication itself is nftables, set up with the node.

No pyroute2 here: a raw rtnetlink socket tells us "some link changed" and routes are applied with
one ``ip -batch``; this keeps the agent near 15 MB instead of 35 MB.

Run inside the host's namespace: ``python -m hpnlab.node.agents.host NODE_JSON [--status FILE]``.
"""

from __future__ import annotations

import subprocess
import time

from hpnlab.node.agents import lacp, microbfd
from hpnlab.node.agents.agent import (agent_main, apply_carriers, KernelWriter, LacpDriver, StatusFile, arp_request, log,
                               read_carriers, wait)
from hpnlab.node.rtnl import RTMGRP_LINK, link_states, nl_messages, rtnl_socket

ARP_REFRESH = 1.0  # the host re-announces itself each second, so a ToR whose ARP entry aged out relearns it


def route_lines(nic: dict, usable: list[str], rto_min_ms: int | None = None) -> list[str]:
    """``ip -batch`` lines for one NIC given the ports that may carry traffic (pure, unit-tested). With
    ``rto_min_ms`` (a dilated lab) each route carries TCP's minimum RTO: ip locks the metric, so it holds for
    every connection over the route whatever net.ipv4.tcp_rto_min_us says."""
    lines = []
    own, gw, src = nic["subnet"], nic["gateway"], nic["ip"]
    if rto_min_ms:
        src = f"{src} rto_min {rto_min_ms}ms"
    if not usable:
        return [f"route del {own}"] + [f"route del {s}" for s in nic["remote_subnets"]]
    if len(usable) == 1:
        lines.append(f"route replace {own} proto static src {src} dev {usable[0]}")
        lines += [f"route replace {s} proto static src {src} via {gw} dev {usable[0]} onlink"
                  for s in nic["remote_subnets"]]
    else:
        # Own subnet: ARP for the peer itself; the ToR's proxy answers with its MAC (routed at the ToR).
        lines.append(f"route replace {own} proto static src {src} " + " ".join(f"nexthop dev {p}" for p in usable))
        hops = " ".join(f"nexthop via {gw} dev {p} onlink" for p in usable)
        lines += [f"route replace {s} proto static src {src} {hops}" for s in nic["remote_subnets"]]
    return lines


class HostAgent:
    def __init__(self, cfg: dict, status: str | None):
        self.cfg = cfg
        self.mech = cfg["mechanisms"]
        self.nics = cfg["nics"]
        lc = cfg["lacp"]
        k = cfg.get("time_dilation", 1)  # spec time_dilation: LACP's timers and the re-announcement k times slower
        self.groups: list[list[lacp.Port]] = []
        for nic in self.nics:
            self.groups.append([lacp.Port(ifc, nic["mac"], nic["mac"], lc["key"], i + 1,
                                          sys_prio=lc["system_priority"], fast=lc["fast_rate"],
                                          scale=k)
                                for i, ifc in enumerate(nic["ports"])])
        self.ports = [p for g in self.groups for p in g]
        self.driver = LacpDriver(self.ports, self.mech["lacp"])
        mb = cfg.get("micro_bfd") or {}
        self.bfd = microbfd.Driver(cfg["name"], [(ifc, nic["mac"], nic["ip"], nic["gateway"]) for nic in self.nics
                                                 for ifc in nic["ports"]],
                                   mb["interval_ms"], mb["multiplier"], self.driver.send) if mb.get("enabled") else None
        self.nl = rtnl_socket(RTMGRP_LINK)
        self.applied: list[tuple[str, ...] | None] = [None] * len(self.nics)
        self.last_arp: dict[str, float] = {}
        self.arp_refresh = ARP_REFRESH * k
        self.status = StatusFile(status)
        self.route_changes = 0
        self.writer = KernelWriter()

    def usable(self, group: list[lacp.Port]) -> list[str]:
        # micro-BFD (when on) must be Up too: a member whose far end stopped forwarding leaves the aggregate
        return [p.iface for p in group if p.enabled and (p.distributing if self.mech["lacp"] else True)
                and (self.bfd is None or self.bfd.up(p.iface))]

    def reconcile(self, now: float) -> bool:
        batch: list[str] = []
        for i, (nic, group) in enumerate(zip(self.nics, self.groups)):
            use = tuple(self.usable(group))
            # Without the ARP broadcast module a host's ARP leaves one port only (the kernel picks one).
            for ifc in use if self.mech["arp_duplication"] else use[:1]:
                if ifc not in (self.applied[i] or ()) or now - self.last_arp.get(ifc, 0) >= self.arp_refresh:
                    self.driver.send(ifc, arp_request(nic["mac"], nic["ip"], nic["gateway"]))
                    self.last_arp[ifc] = now
            if use != self.applied[i]:
                batch += route_lines(nic, list(use), self.cfg.get("rto_min_ms"))
                log(f"rail {nic['rail']} {nic['ip']}: nexthops {list(self.applied[i] or ())} -> {list(use)}")
                self.applied[i] = use
        if not batch:
            return False
        self.writer.submit(apply_routes, batch)  # in order, off this loop (agent.KernelWriter says why)
        self.route_changes += 1
        return True

    def snapshot(self, now: float) -> dict:
        return {"node": self.cfg["name"], "role": "host", "mechanisms": self.mech,
                "nics": [{"rail": n["rail"], "ip": n["ip"], "nexthops": list(self.applied[i] or ()),
                          "ports": [{**p.status(now), **({"micro_bfd": self.bfd.sessions[p.iface].status()}
                                                         if self.bfd else {})} for p in g]}
                         for i, (n, g) in enumerate(zip(self.nics, self.groups))],
                "route_changes": self.route_changes}

    def read_carriers(self, now: float) -> None:
        read_carriers(self.ports, self.bfd, now, self.driver.touch)

    def run(self) -> None:
        now = time.monotonic()
        self.read_carriers(now)
        last_status = 0.0
        log(f"host agent up: {len(self.nics)} NICs, lacp={'on' if self.mech['lacp'] else 'off'}")
        while True:
            deadline = min(self.driver.next_deadline(now), now + 1.0, self.bfd.next_deadline() if self.bfd else now + 1)
            bfd_fds = self.bfd.fds() if self.bfd else []
            for fd in wait(self.driver.fds() + bfd_fds + [self.nl.fileno()], deadline):
                now = time.monotonic()
                if fd == self.nl.fileno():
                    msgs, overrun = nl_messages(self.nl)
                    if overrun:  # the kernel dropped notifications: read every port again
                        self.read_carriers(now)
                    else:
                        apply_carriers(self.ports, self.bfd, now, link_states(msgs), self.driver.touch)
                elif fd in bfd_fds:
                    self.bfd.handle(fd, now)
                else:
                    self.driver.handle(fd, now)
            now = time.monotonic()
            # only the NICs with a port touched or due (agent.LacpDriver says why); selection is per NIC
            stepped = self.driver.step_ports(now)
            names = {p.iface for p in stepped}
            groups = self.groups if stepped is self.ports else [g for g in self.groups if any(p.iface in names for p in g)]
            for g in groups:
                lacp.select(g)
                for p in g:
                    p.tick(now)
                    for e in p.events:
                        log(e)
                    p.events.clear()
                self.driver.transmit(now, g)
            if self.bfd:
                for e in self.bfd.tick_and_send(now):
                    log(e)
            changed = self.reconcile(now)
            if changed or now - last_status >= 1.0:
                self.status.write(self.snapshot(now))
                last_status = now

    def stop(self) -> None:
        log("stopping")
        self.writer.wait_idle(5)


def apply_routes(batch: list[str]) -> None:
    """(writer thread) One ``ip -batch`` with a NIC's route lines."""
    r = subprocess.run(["ip", "-force", "-batch", "-"], input="\n".join(batch) + "\n", text=True, capture_output=True)
    if r.returncode and "No such process" not in r.stderr:
        log(f"ip batch: {r.stderr.strip()}")


def main(argv: list[str] | None = None) -> int:
    return agent_main(HostAgent, __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())

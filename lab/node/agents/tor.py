"""ToR agent: LACP as one half of a virtual system, and ARP entries -> /32 host routes in table 10.

A neighbour learned on a host port becomes ``<ip>/32 dev <port>`` in the import table while the port
has carrier and (with LACP on) is Collecting/Distributing; zebra imports the table and bgpd advertises
it. The ARP proxy itself is the kernel's (proxy_arp, proxy_delay 0), set up with the node.

Run inside the ToR's namespace: ``python -m hpnlab.node.agents.tor NODE_JSON [--status FILE]``.
"""

from __future__ import annotations

import ipaddress
import socket
import time

from hpnlab.node import rtnl, slip
from hpnlab.node.agents import lacp, microbfd, spray, stack
from hpnlab.node.agents.agent import (GAPS, agent_main, apply_carriers, CarrierEvents, KernelWriter, LacpDriver, StatusFile,
                               closed_fd, iface_mac, log, wait)
from hpnlab.node.rtnl import (RT_SCOPE_LINK, RTM_DELNEIGH, RTM_DELROUTE, RTM_NEWNEIGH, RTM_NEWROUTE, RTMGRP_IPV4_ROUTE,
                              RTMGRP_LINK, RTMGRP_NEIGH, RTN_BLACKHOLE, dump_links, link_states, nl_messages,
                              parse_neigh, parse_route, rtnl_socket)

NUD_INCOMPLETE, NUD_FAILED = 0x01, 0x20
PROTO_HPNLAB = 99  # route protocol id marking our table-10 routes (iproute2 may print it as 'openr')
# Safety nets behind the netlink subscriptions, which carry every change as it happens: the kernel's
# neighbour table and the ports' carrier are read whole this often. Read every second, the carrier dump
# was a third of an idle 128-port ToR agent's CPU (sampled); the shipped experiments never needed it.
RESYNC_S = 5.0
# the slip guard reads the BFD packets it saw at most this often (their kernel timestamps keep their times)
WATCH_DRAIN_S = 0.25


# After a resume that should cost the ToR its BGP sessions, the stale routes' withdrawal is waited for this
# long before the sessions are taken to have survived. Why it can be short: the ToR's own BFD and hold
# timers expired while it was stopped, so bfdd and bgpd tear the sessions down on their first run after
# the resume (the withdrawal came 95 ms after it on the default lab); what the wait guards against is a
# stop the sessions outlived, which would otherwise hold the ports for the hold-down's whole bound.
RESUME_GRACE_S = 1.0
# While a resume holds the ports, a host the ToR cannot reach yet is ARPed for again this often (its port's
# carrier may have come back after the resume; a request can be lost)
SOLICIT_EVERY_S = 1.0


class Resume:
    """One resume episode: the routes watched, which of them were withdrawn since, which came back."""

    def __init__(self, now: float, stopped_s: float, expect_withdraw: bool):
        self.since, self.stopped_s, self.expect_withdraw = now, stopped_s, expect_withdraw
        self.withdrawn: set[str] = set()
        self.back: set[str] = set()
        # the hosts this ToR cannot deliver to yet: no /32 out of their port in the main table (set by the
        # agent on every check; None until the first)
        self.hosts_unreached: list[str] | None = None
        self.hosts_waited: set[str] = set()  # every host it waited for in this episode

    def bgp_waiting(self, now: float) -> str | None:
        """Why the BGP part of this resume still holds the ports (None: its routes are settled)."""
        gone = sorted(self.withdrawn - self.back)
        if gone:
            return f"route(s) to {', '.join(gone)} withdrawn after the resume, not yet relearnt"
        if self.expect_withdraw and not self.withdrawn and now - self.since < RESUME_GRACE_S:
            return "waiting for the stale BGP routes to be withdrawn"
        return None

    def waiting_for(self, now: float) -> str | None:
        """Why the ports are still held for this resume, or None when they need not be: first the fabric's
        routes, then the hosts' (the agent installs those once the former are settled)."""
        bgp = self.bgp_waiting(now)
        if bgp:
            return bgp
        hosts = self.hosts_unreached
        if hosts is None:
            return "host routes not checked yet"
        if hosts:
            more = f" and {len(hosts) - 4} more" if len(hosts) > 4 else ""
            return f"host route(s) to {', '.join(hosts[:4])}{more} not back in the FIB"
        return None


class HoldDown:
    """The ToR hold-down as a pure state machine: host ports held while routes are missing, and after the
    agent finds its own loop was stopped for longer than the hosts take to detect it (a hung ToR that
    resumes) until its BGP routes were withdrawn and relearnt; for at most ``max_s`` per episode (an
    episode ends when neither holds), so a healthy ToR is never kept out for longer.

    Why the resume needs its own condition: a ToR stopped for longer than its BGP sessions' detection
    resumes with its routes still in the FIB, though its peers have torn the sessions down; its host
    ports come back at once (micro-BFD, LACP) and bgpd flushes the stale routes only afterwards, so
    upstream traffic the hosts hash onto it is dropped until the sessions are up again. Nothing is
    missing at the resume, so the boot condition alone lets the ports in."""

    def __init__(self, enabled: bool, max_s: float):
        self.enabled, self.max_s = enabled, max_s
        self.held = False
        self.since: float | None = None
        self.bound_hit = False
        self.missing: list[str] = []
        self.events: list[str] = []
        self.episodes = 0
        self.resume: Resume | None = None
        self.resumes = 0
        self.last_resume: dict | None = None

    def resumed(self, now: float, stopped_s: float, expect_withdraw: bool, missing: list[str]) -> None:
        """The agent's loop was stopped for ``stopped_s``; ``expect_withdraw``: longer than the BGP sessions'
        detection, so their routes are stale; ``missing``: the watched routes already gone (read after the
        route events were subscribed, so no later withdrawal is missed)."""
        if not self.enabled:
            return
        self.resume = Resume(now, stopped_s, expect_withdraw)
        self.resume.withdrawn.update(missing)
        self.resumes += 1
        self.events.append(f"hold-down: loop stopped for {stopped_s:.2f} s, longer than the hosts' detection; host "
                           f"ports held until " + ("the BGP routes are withdrawn and relearnt" if expect_withdraw
                                                   else "every route is there (the sessions outlive the stop)"))

    def hosts(self, unreached: list[str]) -> None:
        """The hosts on ports with carrier that the ToR cannot deliver to yet (TorAgent.hosts_unreached:
        no /32 out of their port in the FIB): a host a resumed ToR cannot deliver to. Its neighbour entry failed while
        the ToR was stopped (its ARP probes went unanswered, all ingress dropped), and the host route made
        from it went with it; a port let in before it is back drops what the hosts send to that host."""
        r = self.resume
        if r is not None:
            unreached = sorted(unreached)
            if r.hosts_unreached is not None and unreached != r.hosts_unreached:
                self.events.append(f"hold-down: host routes to {len(unreached)} host(s) not in the FIB"
                                   + (f" ({', '.join(unreached[:4])}{' ...' if len(unreached) > 4 else ''})"
                                      if unreached else ""))
            r.hosts_unreached = unreached
            r.hosts_waited.update(unreached)

    def route(self, prefix: str, present: bool) -> None:
        """A watched route was installed (``present``) or withdrawn since the resume."""
        r = self.resume
        if r is None:
            return
        if not present:
            r.withdrawn.add(prefix)
            r.back.discard(prefix)
        elif prefix in r.withdrawn:
            r.back.add(prefix)

    def _resume_reason(self, now: float) -> str | None:
        r = self.resume
        if r is None:
            return None
        why = r.waiting_for(now)
        if why is None:
            self.last_resume = {"stopped_s": round(r.stopped_s, 3), "held_s": round(now - r.since, 3),
                                "withdrawn": sorted(r.withdrawn), "relearnt": sorted(r.back),
                                "hosts_waited": sorted(r.hosts_waited)}
            self.events.append(f"hold-down: {now - r.since:.2f} s after the resume " +
                               ("its routes were withdrawn and relearnt" if r.withdrawn else
                                "no route was withdrawn: the sessions survived the stop" if r.expect_withdraw
                                else "every route is there"))
            self.resume = None
        return why

    def update(self, now: float, missing: list[str]) -> bool:
        self.missing = missing
        resume_why = self._resume_reason(now)
        if not missing and resume_why is None:
            if self.held:
                self.events.append(f"hold-down released after {now - self.since:.2f} s: every route it waits for is there")
            self.held, self.since, self.bound_hit = False, None, False
            return False
        if self.since is None:  # a resume's episode began with the resume
            self.since = self.resume.since if self.resume is not None else now
            self.episodes += 1
            self.events.append(f"hold-down: no route to {', '.join(missing)}; host ports kept out of their aggregates"
                               if missing else f"hold-down: {resume_why}; host ports kept out of their aggregates")
        if not self.bound_hit and now - self.since >= self.max_s:
            self.bound_hit = True
            self.events.append(f"hold-down bound of {self.max_s:g} s reached, "
                               + (f"{len(missing)} route(s) still missing" if missing else str(resume_why))
                               + ": host ports let in")
            self.resume = None
        self.held = not self.bound_hit
        return self.held

    def status(self, now: float) -> dict:
        return {"enabled": self.enabled, "held": self.held, "missing": self.missing, "bound_s": self.max_s,
                "held_for": round(now - self.since, 2) if self.since is not None else 0.0,
                "bound_hit": self.bound_hit, "episodes": self.episodes, "resumes": self.resumes,
                "resume": ({"since_s": round(now - self.resume.since, 2), "withdrawn": sorted(self.resume.withdrawn),
                            "relearnt": sorted(self.resume.back), "hosts_unreached": self.resume.hosts_unreached}
                           if self.resume else None),
                "last_resume": self.last_resume}


class TorAgent:
    def __init__(self, cfg: dict, status: str | None):
        self.cfg = cfg
        self.mech = cfg["mechanisms"]
        self.table = cfg["table"]
        self.subnet = ipaddress.IPv4Network(cfg["subnet"])
        self.gateway = cfg["gateway"]
        lc = cfg["lacp"]
        k = cfg.get("time_dilation", 1)  # spec time_dilation: LACP's timers and the solicitation k times slower
        self.ports = [lacp.Port(hp["iface"], iface_mac(hp["iface"]), lc["system_mac"], lc["key"], hp["port_id"],
                                sys_prio=lc["system_priority"], fast=lc["fast_rate"],
                                scale=k) for hp in cfg["host_ports"]]
        self.by_iface = {p.iface: p for p in self.ports}
        self.driver = LacpDriver(self.ports, self.mech["lacp"])
        mb = cfg.get("micro_bfd") or {}
        self.bfd = microbfd.Driver(cfg["name"], [(hp["iface"], iface_mac(hp["iface"]), cfg["gateway"], hp["host_ip"])
                                                 for hp in cfg["host_ports"]],
                                   mb["interval_ms"], mb["multiplier"], self.driver.send) if mb.get("enabled") else None
        hd = cfg.get("holddown") or {}
        self.hold = HoldDown(bool(hd.get("enabled")), float(hd.get("max_s", 30)))
        self.remote = [str(ipaddress.IPv4Network(n)) for n in cfg.get("remote_subnets") or []]
        self.next_fib_check = 0.0
        # A loop stopped for longer than the hosts take to detect a silent ToR (micro-BFD, else LACP's
        # timeout) is a resume: the hosts took the ports out meanwhile, and the hold-down decides when
        # they come back. Its planned sleeps are far shorter (a timer of each is due every interval).
        detect = ([mb["interval_ms"] * mb["multiplier"] / 1000] if mb.get("enabled") else []) + \
            ([(lacp.SHORT_TIMEOUT if lc["fast_rate"] else lacp.LONG_TIMEOUT) * k] if self.mech["lacp"] else [])
        self.resume_after_s = min(detect) if detect else None
        self.session_detect_s = cfg.get("session_detect_s")
        self.solicit_every = SOLICIT_EVERY_S * k
        self.routes_nl = None  # route events, subscribed while a resume episode lasts
        self.host_ip_of = {hp["iface"]: hp["host_ip"] for hp in cfg["host_ports"]}
        self.port_of_host_net = {f"{ip}/32": ifc for ifc, ip in self.host_ip_of.items()}
        # the table a host route must be in for this ToR to deliver to the host: the main table, where zebra
        # imports table 10 (mechanisms.host_routes), else table 10 itself
        self.host_fib_table = 254 if cfg["mechanisms"].get("host_routes", True) else cfg["table"]
        # host /32 -> its output interface, while a resume lasts: in the table it is forwarded by, and in
        # table 10 (the agent's own writes, seen landing: the writer thread makes them)
        self.host_fib: dict[str, int | None] = {}
        self.host_t10: dict[str, int | None] = {}
        # Ports of a resumed ToR whose host routes go in before the port is let back into the aggregate
        # (so a host that distributes onto it finds its peers' routes there), and stay until the port is
        # usable the usual way (LACP Collecting_Distributing, micro-BFD up); port -> give-up time
        self.resume_ports: dict[str, float] = {}
        self.solicited: dict[str, float] = {}  # host ip -> when this agent last ARPed for it (resume)
        self.writer = KernelWriter()
        st = cfg.get("stacked")  # the stacked baseline: peer-link sync, out-of-band heartbeat, the §4.1 rule
        self.pair = stack.Pair(cfg["name"], st["role"], st["sync_timeout_ms"] / 1000, st["heartbeat_timeout_ms"] / 1000,
                               time.monotonic()) if st else None
        self.pairlink = stack.PairLink() if st else None
        self.port_to_host = {hp["iface"]: hp["host"] for hp in cfg["host_ports"]}
        self.host_to_port = {hp["host"]: hp["iface"] for hp in cfg["host_ports"]}
        self.ports_shut = False
        self.nl = rtnl_socket(RTMGRP_LINK | RTMGRP_NEIGH)  # bound before the first dump: no early ARP is missed
        self.ifindex = {p.iface: socket.if_nametoindex(p.iface) for p in self.ports}
        self.ifname = {v: k for k, v in self.ifindex.items()}
        self.neigh: dict[str, str] = {}  # ip -> iface, valid entries on host ports
        self.installed: dict[str, str] = {}  # ip -> iface in table 10
        self.status = StatusFile(status)
        self.changes = 0
        self.carrier_events = CarrierEvents()
        # Something reconcile() reads changed since it last ran (a neighbour, a port's carrier, LACP mux or
        # micro-BFD state, the hold-down, a failed route write): it walks every neighbour, and at LACP fast
        # the loop wakes for each PDU, so it runs only then (and with the stacked pair's sync, always)
        self.routes_stale = True
        # multipath.mode spray: the per-uplink tables follow the main table (hpnlab.node.agents.spray)
        self.spray = spray.Keeper(cfg) if (cfg.get("multipath") or {}).get("mode") in spray.MODES else None
        # the slip guard: bfdd's sessions on the uplinks, both ways, seen on the wire (hpnlab.node.slip); an
        # interval of half the detection time or more is kept
        self.bfd_watch = slip.BfdWatch(cfg.get("fabric_ifaces") or [], cfg["session_detect_s"] / 2, GAPS) \
            if cfg.get("bfd") and cfg.get("session_detect_s") else None
        self.watch_next = 0.0

    # --- state -----------------------------------------------------------------------------------
    def port_ok(self, iface: str) -> bool:
        p = self.by_iface[iface]
        if iface in self.resume_ports:  # a resumed ToR: its host routes first, once its BGP routes are settled
            r = self.hold.resume
            return p.enabled and (r is None or r.bgp_waiting(time.monotonic()) is None)
        return self.port_usable(iface)

    def port_usable(self, iface: str) -> bool:
        p = self.by_iface[iface]
        return p.enabled and (p.distributing if self.mech["lacp"] else True) and not self.hold.held \
            and (self.bfd is None or self.bfd.up(iface))

    def hosts_unreached(self) -> list[str]:
        """Hosts on ports with carrier this ToR cannot deliver to yet (resume): a reachable host has a valid
        neighbour entry on its port, the agent's /32 out of that port written to table 10, and a route out
        of that port in the table it is forwarded by. All of them: at the resume the main table may still
        hold zebra's copy of a route the agent is about to withdraw (the host's entry failed during the
        stop), and it is the entry and the agent's own write that say the copy is not stale."""
        out = []
        for p in self.ports:
            ip = self.host_ip_of[p.iface]
            net, idx = f"{ip}/32", self.ifindex[p.iface]
            if p.enabled and not (self.neigh.get(ip) == p.iface and self.installed.get(ip) == p.iface
                                  and self.host_t10.get(net) == idx and self.host_fib.get(net) == idx):
                out.append(ip)
        return out

    def read_host_routes(self) -> dict[str, int | None]:
        """Read the host /32s of table 10 and of the table they are forwarded by into ``host_t10`` and
        ``host_fib`` (one dump); returns the main table (prefix -> output interface)."""
        tabs = rtnl.tables_oifs((254, self.table))
        self.host_t10 = {n: o for n, o in tabs[self.table].items() if n in self.port_of_host_net}
        self.host_fib = {n: o for n, o in tabs[self.host_fib_table].items() if n in self.port_of_host_net}
        return tabs[254]

    def solicit_hosts(self, now: float, only: list[str] | None = None) -> None:
        """ARP for the hosts on ports with carrier now (the kernel's own resolution: NTF_USE), rather than
        wait for a host to send something: its entry failed while this ToR was stopped. ``only``: these
        hosts, each at most once a second (a port whose carrier came back later, a host that did not answer)."""
        for p in self.ports:
            ip = self.host_ip_of[p.iface]
            if not p.enabled or self.neigh.get(ip) == p.iface or (only is not None and ip not in only):
                continue
            if now - self.solicited.get(ip, -self.solicit_every) < self.solicit_every:
                continue
            self.solicited[ip] = now
            try:
                rtnl.neigh_solicit(ip, self.ifindex[p.iface])
            except OSError as e:
                log(f"{p.iface}: ARP for {ip}: {e}")

    def settle_resume_ports(self, now: float) -> None:
        """After the release, a resumed port leaves ``resume_ports`` once it is usable the usual way, loses
        carrier, or its host has not taken it back within a LACP timeout (its route then follows the usual
        rule again)."""
        if not self.resume_ports:
            return
        if self.hold.resume is not None:  # held: every port keeps its place (a carrier may come back)
            return
        for ifc, give_up in list(self.resume_ports.items()):
            if give_up == 0.0:
                self.resume_ports[ifc] = give_up = now + (self.resume_after_s or lacp.SHORT_TIMEOUT)
            if self.port_usable(ifc) or not self.by_iface[ifc].enabled or now > give_up:
                del self.resume_ports[ifc]
                self.routes_stale = True

    # --- hold-down ---------------------------------------------------------------------------------
    def fabric_missing(self) -> list[str]:
        """The other sets' subnets (of this rail) the main table has no route to."""
        have = rtnl.route_prefixes(254)
        return [n for n in self.remote if n not in have]

    def update_hold(self, now: float, missing: list[str] | None = None) -> None:
        """Why this condition: hosts send their cross-set traffic up through the ToR by these BGP routes.
        Until each is in the FIB, a flow a host hashes onto this ToR is dropped here (the boot black hole);
        traffic towards the hosts needs nothing more than the ARP-learned /32s. Checked every 100 ms while
        held, every 500 ms otherwise (losing every uplink holds the ports down too)."""
        if not self.hold.enabled or now < self.next_fib_check:
            return
        self.next_fib_check = now + (0.1 if self.hold.held or self.hold.resume is not None else 0.5)
        if self.resume_ports:  # port_ok() of these follows the resume's BGP part, which no event of ours marks
            self.routes_stale = True
        if self.hold.resume is not None:
            unreached = self.hosts_unreached()
            self.hold.hosts(unreached)
            self.solicit_hosts(now, unreached)
        self.hold.update(now, self.fabric_missing() if missing is None else missing)
        for e in self.hold.events:
            log(e)
        self.hold.events.clear()
        if self.hold.resume is None and self.routes_nl is not None:
            self.routes_nl.close()
            closed_fd()
            self.routes_nl = None

    def check_stall(self, now: float, last_alive: float) -> None:
        """Was this loop stopped (SIGSTOP, a hung switch) for longer than the hosts' detection time?"""
        stopped = now - last_alive
        if not self.hold.enabled or self.resume_after_s is None or stopped <= self.resume_after_s:
            return
        if self.routes_nl is None:  # subscribed before the table is read: no withdrawal is missed
            self.routes_nl = rtnl_socket(RTMGRP_IPV4_ROUTE)
        # the sessions' detection expired too (the peers tore them down): the FIB's BGP routes are stale
        expect = self.session_detect_s is not None and stopped > self.session_detect_s and bool(self.remote)
        # the neighbour entries as the kernel holds them after the stop (those that failed during it), before
        # anything below reads them; the events saying so are still queued
        self._drain(now)
        self.resync_neighbours()
        fib = self.read_host_routes()  # one table read serves both: it is the same moment
        missing = [n for n in self.remote if n not in fib]
        self.hold.resumed(now, stopped, expect, missing)
        self.resume_ports = {p.iface: 0.0 for p in self.ports}
        self.routes_stale = True
        self.solicited.clear()
        self.solicit_hosts(now)
        self.next_fib_check = now  # held from this iteration on, before LACP or micro-BFD say anything
        self.update_hold(now, missing)

    def _routes(self, now: float) -> None:
        msgs, overrun = nl_messages(self.routes_nl)
        if overrun:  # lost events: what the tables hold now is all that is known
            have = self.read_host_routes()
            for n in self.remote:
                self.hold.route(n, n in have)
        for mtype, payload in msgs:
            if mtype in (RTM_NEWROUTE, RTM_DELROUTE):
                table, dst = parse_route(payload)
                if table == 254 and dst in self.remote:
                    self.hold.route(dst, mtype == RTM_NEWROUTE)
                    self.next_fib_check = now
                elif dst in self.port_of_host_net and table in (self.host_fib_table, self.table):
                    oif = rtnl.route_oif(payload)
                    for t, known in ((self.host_fib_table, self.host_fib), (self.table, self.host_t10)):
                        if table != t:
                            continue
                        if mtype == RTM_NEWROUTE:
                            known[dst] = oif
                        elif known.get(dst) == oif:
                            del known[dst]
                    self.next_fib_check = now
        self.update_hold(now)

    def _neigh(self, ifindex: int, state: int, dst: str | None, deleted: bool, quiet: bool = False) -> None:
        iface = self.ifname.get(ifindex)
        if not iface or not dst or ":" in dst or ipaddress.IPv4Address(dst) not in self.subnet:
            return
        if deleted or state & (NUD_FAILED | NUD_INCOMPLETE):
            if self.neigh.get(dst) == iface:
                del self.neigh[dst]
                self.routes_stale = True
                if not quiet:  # the timeline's ARP/neighbour events: why a host's /32 is withdrawn
                    log(f"{iface}: neighbour {dst} " + ("deleted" if deleted else
                                                        "failed" if state & NUD_FAILED else "incomplete"))
        else:
            if self.neigh.get(dst) != iface:
                if not quiet:
                    log(f"{iface}: neighbour {dst} learned")
                self.routes_stale = True
            self.neigh[dst] = iface

    def _netlink(self, now: float) -> None:
        msgs, overrun = nl_messages(self.nl)
        if overrun:  # the kernel dropped events: re-read everything
            self.resync(now)
            return
        self._events(msgs, now)

    def _events(self, msgs: list[tuple[int, bytes]], now: float) -> None:
        for mtype, payload in msgs:
            if mtype in (RTM_NEWNEIGH, RTM_DELNEIGH):
                self._neigh(*parse_neigh(payload), deleted=mtype == RTM_DELNEIGH)
        apply_carriers(self.ports, self.bfd, now, self.carrier_events.note(link_states(msgs), now), self.driver.touch)

    def _drain(self, now: float) -> None:
        """Handle the events already queued before a dump: they are older than it, and handled after it
        they would undo it (a dropped batch is fine to lose: the dump reads everything anyway)."""
        msgs, overrun = nl_messages(self.nl)
        if not overrun:
            self._events(msgs, now)

    def read_carriers(self, now: float) -> None:
        """Carrier of every port now, in this thread (newer than any dump the writer has yet to hand back)."""
        have = dump_links()
        states = {p.iface: have.get(p.iface, False) for p in self.ports}
        apply_carriers(self.ports, self.bfd, now, self.carrier_events.note(states, now), self.driver.touch)

    def resync(self, now: float) -> None:
        self._drain(now)
        self.read_carriers(now)
        self.resync_neighbours()

    def resync_neighbours(self) -> None:
        before = dict(self.neigh)
        self.neigh.clear()
        for ifindex, state, dst in rtnl.dump_neighbours(socket.AF_INET):
            self._neigh(ifindex, state, dst, deleted=False, quiet=True)
        for ip, ifc in before.items():
            if self.neigh.get(ip) != ifc:
                log(f"{ifc}: neighbour {ip} gone from the kernel's table (resync)")
        for ip, ifc in self.neigh.items():
            if before.get(ip) != ifc:
                log(f"{ifc}: neighbour {ip} learned (resync)")

    # --- routes ----------------------------------------------------------------------------------
    def reconcile(self) -> None:
        # Always installed: this is the ToR's own host table. mechanisms.host_routes only decides
        # whether FRR imports and advertises it (the frr.conf template).
        self.routes_stale = False
        want = {ip: ifc for ip, ifc in self.neigh.items() if self.port_ok(ifc)}
        if self.pair:  # what the peer learned (and synced) is forwarded out of our port to the same host
            for ip, host in self.pair.peer_neigh.items():
                ifc = self.host_to_port.get(host)
                if ifc and ip not in want and self.port_ok(ifc) and ipaddress.IPv4Address(ip) in self.subnet:
                    want[ip] = ifc
        for ip, ifc in list(self.installed.items()):
            if want.get(ip) != ifc:
                self._remove(ip)
        for ip, ifc in want.items():
            if self.installed.get(ip) != ifc:
                # recorded now, written by the writer thread in order; a failed write is forgotten
                # (``_collect``) so the next reconcile tries again
                self.installed[ip] = ifc
                self.changes += 1
                self.writer.submit(self._add_route, ip, ifc)

    def _add_route(self, ip: str, ifc: str):
        """(writer thread) One host /32 into table 10."""
        try:
            rtnl.route_replace(f"{ip}/32", self.table, oif=self.ifindex[ifc], scope=RT_SCOPE_LINK,
                               proto=PROTO_HPNLAB)
            log(f"host route {ip}/32 dev {ifc} table {self.table} added")
        except OSError as e:
            log(f"host route {ip}/32 dev {ifc}: {e}")
            return ("failed", ip, ifc)
        return None

    def _collect(self, now: float) -> None:
        """What the writer thread found: failed route writes (tried again) and carrier dumps."""
        for r in self.writer.results():
            if r[0] == "failed" and self.installed.get(r[1]) == r[2]:
                del self.installed[r[1]]
                self.routes_stale = True
            elif r[0] == "links":
                apply_carriers(self.ports, self.bfd, now, self.carrier_events.from_dump(self.ports, r[2], r[1]),
                               self.driver.touch)

    @staticmethod
    def _dump_carriers(asked_at: float):
        """(writer thread) The safety net for a missed link notification."""
        return ("links", asked_at, dump_links())

    def _remove(self, ip: str) -> None:
        ifc = self.installed.pop(ip, None)
        self.changes += 1
        self.writer.submit(self._del_route, ip, ifc)

    def _del_route(self, ip: str, ifc: str | None) -> None:
        """(writer thread) FRR 8.4: if the route already vanished with its port (admin down) the kernel sends
        no delete and zebra keeps advertising its imported copy. Re-adding as blackhole and deleting forces
        a delete."""
        try:
            rtnl.route_replace(f"{ip}/32", self.table, rtype=RTN_BLACKHOLE, proto=PROTO_HPNLAB)
            rtnl.route_delete(f"{ip}/32", self.table)
        except OSError as e:
            log(f"host route {ip}/32 removal: {e}")
        log(f"host route {ip}/32 dev {ifc} table {self.table} withdrawn")

    def flush(self) -> None:
        for ip in list(self.installed):
            self._remove(ip)

    # --- loop ------------------------------------------------------------------------------------
    def snapshot(self, now: float) -> dict:
        return {"node": self.cfg["name"], "role": "tor",
                "ports": [{**p.status(now), **({"micro_bfd": self.bfd.sessions[p.iface].status()} if self.bfd else {})}
                          for p in self.ports],
                "holddown": self.hold.status(now),
                "host_routes": dict(sorted(self.installed.items())), "neighbours": dict(sorted(self.neigh.items())),
                "changes": self.changes, "mechanisms": self.mech,
                **({"stack": self.pair.status(now)} if self.pair else {}),
                **({"spray": self.spray.status()} if self.spray else {})}

    def stack_step(self, now: float) -> None:
        """Send heartbeat and sync, apply the §4.1 rule: a secondary that must shut takes its host ports
        admin down (the hosts lose carrier on those links) and brings them back when it may."""
        self.pairlink.send(self.pair, {ip: self.port_to_host[ifc] for ip, ifc in self.neigh.items()}, now)
        shut = self.pair.decide(now)
        for e in self.pair.events:
            log(e)
        self.pair.events.clear()
        if shut != self.ports_shut:
            for ifc, idx in self.ifindex.items():
                try:
                    rtnl.link_set_up(idx, not shut)
                except OSError as e:
                    log(f"{ifc}: admin {'down' if shut else 'up'}: {e}")
            self.ports_shut = shut
            self.read_carriers(now)

    def run(self) -> None:
        now = time.monotonic()
        self.resync(now)
        if self.spray:
            self.spray.start()
        nl = self.nl.fileno()
        last_status = last_resync = last_alive = now
        was_held = self.hold.held
        log(f"tor agent up: {len(self.ports)} host ports, lacp={'on' if self.mech['lacp'] else 'off'}, "
            f"system {self.ports[0].system if self.ports else '-'}")
        while True:
            bfd_fds = self.bfd.fds() if self.bfd else []
            pair_fds = self.pairlink.fds() if self.pairlink else []
            route_fds = [self.routes_nl.fileno()] if self.routes_nl is not None else []
            deadline = min(self.driver.next_deadline(now), self.bfd.next_deadline() if self.bfd else now + 1,
                           self.next_fib_check if self.hold.enabled else now + 1,
                           self.pair.next_tx if self.pair else now + 1)
            ready = wait(self.driver.fds() + bfd_fds + pair_fds + route_fds + [nl], deadline)
            now = body_start = time.monotonic()
            self.check_stall(now, last_alive)
            for fd in ready:
                now = time.monotonic()
                if fd == nl:
                    self._netlink(now)
                elif fd in route_fds:
                    if self.routes_nl is not None:
                        self._routes(now)
                elif fd in bfd_fds:
                    self.bfd.handle(fd, now)
                elif fd in pair_fds:
                    self.pairlink.handle(fd, self.pair, now)
                else:
                    self.driver.handle(fd, now)
            now = time.monotonic()
            if self.pair:
                self.stack_step(now)
            self.update_hold(now)
            held = self.hold.held
            # the ports touched or due (LacpDriver says why not all); every port while the hold-down holds
            # them or when it lets them go, as the hold overrides selection
            stepped = self.driver.step_ports(now)
            ports = self.ports if held or held != was_held else stepped
            if held != was_held:
                self.routes_stale = True  # every port's port_ok() changed with it
            was_held = held
            lacp.select_individual(ports)
            if held:  # unselected: the actor's Synchronization stays off, the hosts do not distribute
                for p in ports:
                    p.selected = False
            for p in ports:
                p.tick(now)
                if p.events:
                    self.routes_stale = True
                    for e in p.events:
                        log(e)
                    p.events.clear()
            self.driver.transmit(now, ports)
            self.settle_resume_ports(now)
            if self.bfd:
                for e in self.bfd.tick_and_send(now):
                    self.routes_stale = True
                    log(e)
            if self.bfd_watch and now >= self.watch_next:  # read at the loop's own pace, never woken for
                self.bfd_watch.drain()
                self.watch_next = now + WATCH_DRAIN_S
            before = self.changes
            self._collect(now)
            if self.routes_stale or self.pair:
                self.reconcile()
            if self.changes != before or now - last_status >= 1.0:
                if now - last_resync >= RESYNC_S:  # safety nets: the kernel's tables are the truth
                    self._drain(now)
                    self.writer.submit(self._dump_carriers, now)
                    self.resync_neighbours()
                    self.reconcile()
                    last_resync = now
                self.status.write(self.snapshot(now))
                last_status = now
            # a stop can land anywhere in the loop, not only in the wait: in the body, it shows as a body
            # that took that long (found here, before the next iteration's LACP and micro-BFD ticks would
            # let the ports back in); in the wait, as a wait that overran (found after it, above)
            last_alive = time.monotonic()
            self.check_stall(last_alive, body_start)

    def stop(self) -> None:
        log("stopping: withdrawing host routes")
        self.flush()
        self.writer.wait_idle(5)


def main(argv: list[str] | None = None) -> int:
    return agent_main(TorAgent, __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())

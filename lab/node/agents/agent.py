"""What both agents share: LACP packet sockets, ARP kicks, a status file, and the select loop.

Kept free of heavy imports (no pyroute2, no scapy) so the agents stay small; netlink is hpnlab.node.rtnl.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import select
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path

from hpnlab.node.agents import lacp
from hpnlab.node.lateness import LateBins
from hpnlab.node.slip import GAPS
from hpnlab.node.rtnl import dump_links

SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_MULTICAST = 0
ETH_P_ARP = 0x0806
AGENT_NICE = -10  # scheduling priority of the agents (FRR runs at 0)


# What the agent did, on the wall clock every namespace shares, for the controller's convergence timeline
# (hpnlab.traffic.analysis.timeline): the most recent events of the last minute go into every status file.
EVENTS: collections.deque = collections.deque(maxlen=400)
EVENTS_S = 60.0


def log(msg: str) -> None:
    now = time.time()
    EVENTS.append((round(now, 4), msg))
    sys.stdout.write(f"{time.strftime('%H:%M:%S', time.localtime(now))}.{int(now * 1000) % 1000:03d} {msg}\n")
    sys.stdout.flush()


def packet_socket(iface: str) -> socket.socket:
    """AF_PACKET socket receiving only Slow Protocols (LACP) frames on ``iface``."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(lacp.ETH_P_SLOW))
    s.bind((iface, lacp.ETH_P_SLOW))
    idx = socket.if_nametoindex(iface)
    mreq = struct.pack("iHH8s", idx, PACKET_MR_MULTICAST, 6, lacp.SLOW_PROTOCOLS_MAC + b"\0\0")
    s.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
    s.setblocking(False)
    return s


def arp_request(src_mac: str, src_ip: str, target_ip: str) -> bytes:
    """Broadcast who-has: makes the ToR on this port learn us (and refresh its /32)."""
    smac = lacp.mac_bytes(src_mac)
    return (b"\xff" * 6 + smac + struct.pack("!H", ETH_P_ARP)
            + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + smac + socket.inet_aton(src_ip)
            + b"\0" * 6 + socket.inet_aton(target_ip))


def apply_carriers(ports: list, bfd, now: float, states: dict[str, bool], touch=None) -> None:
    """Carrier changes for the ports named in ``states``, into LACP and micro-BFD alike; ``touch(port)``
    (the LacpDriver's) hears of each port whose carrier changed, so its machines are stepped."""
    for p in ports:
        if p.iface in states:
            if touch is not None and p.enabled != states[p.iface]:
                touch(p)
            p.set_enabled(states[p.iface], now)
            if bfd:
                bfd.set_enabled(p.iface, states[p.iface], now)


class CarrierEvents:
    """When each port's carrier was last reported by a netlink event, so a whole-table dump made off the
    loop (by the writer thread, and read back later) cannot undo a newer event.

    Why: the dump is a snapshot from when it was asked for. A ToR agent saw a repaired link's carrier-up
    event, then applied a dump taken a moment before the repair: the port went back to down and stayed
    there until the next dump 5 s later (an experiment's link stayed black-holed past its repair). A port
    with an event since the dump was asked for keeps that event's state; the others take the dump's."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}

    def note(self, states: dict[str, bool], now: float) -> dict[str, bool]:
        for name in states:
            self.at[name] = now
        return states

    def from_dump(self, ports: list, dump: dict[str, bool], asked_at: float) -> dict[str, bool]:
        return {p.iface: dump.get(p.iface, False) for p in ports if self.at.get(p.iface, float("-inf")) < asked_at}


def read_carriers(ports: list, bfd, now: float, touch=None) -> None:
    """Carrier as it is now, for every port (one netlink dump; a port missing from it is down)."""
    have = dump_links()
    apply_carriers(ports, bfd, now, {p.iface: have.get(p.iface, False) for p in ports}, touch)


class KernelWriter:
    """One thread that makes an agent's route writes and carrier dumps, in the order they are asked for,
    so the loop that sends LACPDUs and BFD packets never waits on the kernel's RTNL lock.

    Why: RTNL is one lock for every namespace of the machine, and every route change takes it. While a
    large lab converges, zebra holds it for seconds at a time (60-way ECMP installs on the paper's
    segment). An agent blocked in a route write there sent no LACPDUs, its partners' LACP expired after
    3 s, their ports left the aggregates, host routes were withdrawn: more route work, more waiting.
    A real switch's LACP does not wait for its FIB writes either. A job returns None or a value the loop
    collects with ``results()``."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.out: queue.SimpleQueue = queue.SimpleQueue()
        self.pending = 0
        self.lock = threading.Lock()
        self.idle = threading.Event()
        self.idle.set()
        threading.Thread(target=self._run, name="kernel-writer", daemon=True).start()

    def submit(self, fn, *args) -> None:
        with self.lock:
            self.pending += 1
            self.idle.clear()
        self.jobs.put((fn, args))

    def _run(self) -> None:
        while True:
            fn, args = self.jobs.get()
            try:
                r = fn(*args)
            except Exception as e:  # a job reports its own errors; this only keeps the thread alive
                r = None
                log(f"kernel write {getattr(fn, '__name__', fn)}: {e.__class__.__name__}: {e}")
            if r is not None:
                self.out.put(r)
            with self.lock:
                self.pending -= 1
                if not self.pending:
                    self.idle.set()

    def results(self) -> list:
        out = []
        while True:
            try:
                out.append(self.out.get_nowait())
            except queue.Empty:
                return out

    def wait_idle(self, timeout: float) -> bool:
        return self.idle.wait(timeout)


def iface_mac(iface: str) -> str:
    return Path(f"/sys/class/net/{iface}/address").read_text().strip()


class StatusFile:
    """Atomically rewritten JSON: status/verify read it; its ``time`` is the agent's heartbeat.

    Rewritten every second by every agent, so it is kept cheap: the last minute's events (most of the file
    after a bring-up, and unchanged from one write to the next while nothing happens) are serialized again
    only when they changed, and the bytes go out with one open/write/rename. Why: a profile of idle agents
    at LACP fast put over a third of their active samples in this write (a write costs ~0.3 ms, about 0.7 of
    what it did; docs/scale.md, "A cheaper status file", has the measurements)."""

    def __init__(self, path: str | None):
        self.path = Path(path) if path else None
        self._events: tuple = (None, "[]")  # (which events, their JSON)

    def events_json(self, now: float) -> str:
        """The JSON list of the events of the last EVENTS_S, reused while it is the same list: events only
        ever come at the end and leave from the front, so its length and its two ends name it."""
        # tuple() copies the deque in one step: the writer thread logs (appends) meanwhile, and iterating
        # the deque itself then fails with "deque mutated during iteration" (it killed a ToR agent)
        evs = tuple(EVENTS)
        i = next((k for k, e in enumerate(evs) if e[0] > now - EVENTS_S), len(evs))
        key = (len(evs) - i, evs[i] if i < len(evs) else None, evs[-1] if evs else None)
        if key != self._events[0]:
            self._events = (key, json.dumps(evs[i:]))
        return self._events[1]

    def write(self, data: dict) -> None:
        if not self.path:
            return
        now = time.time()
        head = json.dumps({**data, "pid": os.getpid(), "time": now, "timers_late": TIMERS.report(),
                           "packet_gaps": GAPS.report(now)})
        # head is never empty (pid, time, timers_late): the events go in as its last key
        body = (head[:-1] + ', "events": ' + self.events_json(now) + "}").encode()
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, body)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)


class Stop(Exception):
    pass


def install_signal_handlers() -> None:
    def stop(_sig, _frm):
        raise Stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


class LacpDriver:
    """Owns the packet sockets of a set of LACP ports, moves frames in and out of the machines, and says
    which ports need a step now (``lacp.Timers``: touched since the last step, or a timer due)."""

    def __init__(self, ports: list[lacp.Port], enabled: bool):
        self.ports = ports
        self.enabled = enabled  # mechanisms.lacp; off = static, no LACPDUs
        self.socks: dict[int, tuple[socket.socket, lacp.Port]] = {}
        self.tx_socks: dict[str, socket.socket] = {}
        for p in ports:
            s = packet_socket(p.iface)
            self.tx_socks[p.iface] = s
            if enabled:
                self.socks[s.fileno()] = (s, p)
        self.timers = lacp.Timers(ports)

    def fds(self) -> list[int]:
        return list(self.socks)

    def touch(self, port: lacp.Port) -> None:
        self.timers.touch(port)

    def handle(self, fd: int, now: float) -> None:
        s, port = self.socks[fd]
        while True:
            try:
                frame = s.recv(2048)
            except BlockingIOError:
                return
            except OSError:
                return  # link went away under us; carrier handling resyncs
            pdu = lacp.decode(frame)
            if pdu:
                # the slip guard: an interval of half the port's timeout or more between its partner's PDUs
                GAPS.seen(f"lacp {port.iface}", time.time(), port.timeout() / 2)
                port.receive(pdu[0], pdu[1], now)
                self.timers.touch(port)

    def send(self, iface: str, frame: bytes) -> None:
        try:
            self.tx_socks[iface].send(frame)
        except OSError:
            pass  # carrier down: the periodic machine retries

    def step_ports(self, now: float) -> list[lacp.Port]:
        """The ports to step now, in port order (with LACP off: every port, every time, as always)."""
        return self.timers.due(now) if self.enabled else self.ports

    def transmit(self, now: float, ports: list[lacp.Port] | None = None) -> None:
        """Send what ``ports`` (default: all) have due, and set their next timers."""
        if not self.enabled:
            return
        for p in self.ports if ports is None else ports:
            f = p.due(self.timers.send_time(p, now))
            if f:
                self.send(p.iface, f)
            self.timers.schedule(p)

    def next_deadline(self, now: float) -> float:
        if not self.enabled:
            return now + 1.0
        return self.timers.next_deadline(now)


# How late this agent's timers (LACP, micro-BFD, stacking heartbeat, hold-down, status) fired: the loop
# asks to wake at a deadline; waking after it is time the agent waited for a CPU (hpnlab.node.lateness).
TIMERS = LateBins(keep=600)  # 60 s of bins in every status file: the controller reads them after a run
STARTED = time.monotonic()  # a deadline before this is a timer never set (0 + period), not a late one


class _Poller:
    """An epoll set kept across waits while the loop asks for the same fds (it asks every wake-up).

    Why: select() copies and scans every fd each call; a ToR of the paper's segment waits on 130 (one packet
    socket per host port) up to ~256 times a second at LACP fast."""

    def __init__(self) -> None:
        self.fds: list[int] = []
        self.ep: select.epoll | None = None

    def forget(self) -> None:
        """A socket of the set was closed: its number may come back as another socket's, which the same
        list of numbers would not register."""
        self.fds = []

    def poll(self, fds: list[int], timeout: float) -> list[int]:
        if fds != self.fds or self.ep is None:
            if self.ep is not None:
                self.ep.close()
            self.ep = select.epoll()
            for fd in fds:
                self.ep.register(fd, select.EPOLLIN)
            self.fds = list(fds)
        # epoll counts whole ms, and a timeout rounded up would make every timer up to 1 ms late (the lateness
        # meter's threshold): wait the whole ms, then sleep off the rest if nothing came
        end = time.monotonic() + timeout
        r = [fd for fd, _ in self.ep.poll(int(timeout * 1000) / 1000)]
        if not r:
            rest = end - time.monotonic()
            if rest > 0:
                time.sleep(rest)
        return r


_POLLER = _Poller()


def closed_fd() -> None:
    """Tell ``wait`` that a socket it waited on was closed (see _Poller.forget)."""
    _POLLER.forget()


def wait(fds: list[int], deadline: float) -> list[int]:
    before = time.monotonic()
    timeout = max(0.0, min(deadline - before, 1.0))
    r = _POLLER.poll(fds, timeout)
    if STARTED <= deadline <= before + 1.0:  # a timer was due during this wait (else only the 1 s tick)
        now = time.monotonic()
        if not r or now > deadline:
            TIMERS.record(time.time(), now - deadline)
    return r


def agent_main(cls, doc: str, argv: list[str] | None = None) -> int:
    """Shared entry point: ``python -m hpnlab.node.<role> NODE_JSON [--status FILE]``; SIGTERM calls stop()."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("config", help="the node's node.json from hpnlab generate")
    ap.add_argument("--status", help="status file to rewrite every second (the agent's heartbeat)")
    ap.add_argument("--log", help="append stdout and stderr here (for `docker exec -d`, which discards them)")
    args = ap.parse_args(argv)
    if args.log:
        fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    with open(args.config) as f:
        cfg = json.load(f)
    install_signal_handlers()
    # A switch's LACP and ARP handling do not wait behind its routing daemons' CPU. On 2 shared cores a
    # large lab's FRR converging starved the agents past LACP's 3 s timeout; each expired port withdrew
    # host routes, more BGP work, more starvation (measured on the paper's segment: ~3,000 port flaps on
    # one ToR in 4 minutes). The agents need little CPU, so ahead of FRR they cost FRR almost nothing.
    try:
        os.setpriority(os.PRIO_PROCESS, 0, AGENT_NICE)
    except OSError:
        pass  # not allowed (unprivileged container): run at the default priority
    agent = cls(cfg, args.status)
    try:
        agent.run()
    except Stop:
        agent.stop()
    return 0

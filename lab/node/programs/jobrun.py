"""What the node programs that carry a workload's traffic share: their common command-line options (the
run's duration and common start, TCP congestion control, DSCP marking, the report's path), a training job's
own (compute phase, source ports, iteration count), and a job rank's life (hpnlab.node.programs.allreduce and
hpnlab.node.programs.alltoall): stop cleanly on SIGTERM/SIGINT, connect by a deadline, wait for the common start,
run for what is left of the duration, write the report. One place, so the programs cannot drift apart in
how a run starts, stops or reports.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from hpnlab.node.programs import dscp, tcpcc
from hpnlab.node.reports import Live, write_json

CONNECT_S = 15.0  # a rank's connections must be up this long after the common start (or now, if later)


class JobRank(Protocol):
    def connect(self, deadline: float, stop_flag: Callable[[], bool]) -> None: ...

    def run(self, duration: float, stop_flag: Callable[[], bool]) -> dict: ...


def add_common_args(p: argparse.ArgumentParser, marks: str = "every connection's packets, both ends,") -> None:
    """--duration, --start-at, --congestion, --dscp and --out. ``marks``: what --dscp's help says is marked."""
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--start-at", type=float, default=0.0)
    p.add_argument("--congestion", default=tcpcc.DEFAULT,
                   help="TCP congestion control of every connection (setsockopt TCP_CONGESTION; fails if refused)")
    p.add_argument("--dscp", type=int, default=None, choices=range(dscp.DSCP_MAX + 1), metavar="0..63",
                   help=f"mark {marks} with this DSCP (IP_TOS; default: unmarked)")
    p.add_argument("--out", required=True)


def add_job_args(p: argparse.ArgumentParser, sports_help: str) -> None:
    """A training job's --compute-ms, --sports and --iterations."""
    p.add_argument("--compute-ms", type=float, default=0.0,
                   help="GPU work at the start of every iteration, emulated by waiting (ms)")
    p.add_argument("--sports", default="", help=sports_help)
    p.add_argument("--iterations", type=int, default=None, help="stop after this many iterations")
    p.add_argument("--join", default=None, metavar="DIR",
                   help="this process is one rail's part of a rank on several rails: its next iteration (compute, "
                        "then traffic) begins only when every part's iteration has ended (Join; files in DIR)")
    p.add_argument("--join-part", type=int, default=0, help="which part this process is (0 .. --join-parts - 1)")
    p.add_argument("--join-parts", type=int, default=1, help="how many parts (rails) the rank has")


class Join:
    """The rails of one rank of a job on several rails, each rail's part its own process: the rank's next
    iteration begins (its compute, then every rail's traffic) only when every part has ended the iteration
    before, as on a host whose GPU computes once per iteration and then sends on all its rails.

    Each part owns a datagram socket in the host's abstract unix namespace (named from DIR and the part:
    the parts share the host's network namespace, and an abstract name needs no file to clean up). A part
    that ends an iteration sends its count to every other part's socket; a waiting part puts its socket in
    the selector it already waits on, so it wakes when the last part arrives, not on a timer. Each count is
    also written to DIR/PART (replaced whole): a part reads the others' files once, when it first waits,
    for counts sent before its socket existed (a part started later than the others)."""

    def __init__(self, where: str, part: int, parts: int):
        if not 0 <= part < parts:
            raise SystemExit(f"--join-part {part}: give 0 .. {parts - 1} (--join-parts {parts})")
        self.dir, self.part, self.parts = Path(where), part, parts
        self.dir.mkdir(parents=True, exist_ok=True)
        self.seen = [0] * parts  # the iterations each part has ended, as last heard
        key = hashlib.sha256(str(self.dir.resolve()).encode()).hexdigest()[:24]
        self._names = [f"\0hpnlab-join-{key}-{q}" for q in range(parts)]
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self._names[part])
        self.sock.setblocking(False)
        self._files_read = False

    def fileno(self) -> int:
        """The socket a waiting part selects on: readable when another part has sent its count."""
        return self.sock.fileno()

    def arrive(self, ended: int) -> None:
        """This part has ended ``ended`` iterations: its file, then a datagram to every other part."""
        tmp = self.dir / f".{self.part}.tmp"
        tmp.write_text(str(ended))
        os.replace(tmp, self.dir / str(self.part))
        self.seen[self.part] = ended
        msg = f"{self.part} {ended}".encode()
        for q, name in enumerate(self._names):
            if q == self.part:
                continue
            try:
                self.sock.sendto(msg, name)
            except (ConnectionRefusedError, FileNotFoundError):
                pass  # that part has not bound its socket yet (it reads this file when it first waits) or is gone
            except BlockingIOError:
                # its queue is full (max_dgram_qlen counts, a part reads each pass): wait for room, briefly
                self.sock.settimeout(1.0)
                try:
                    self.sock.sendto(msg, name)
                except OSError:
                    pass
                finally:
                    self.sock.setblocking(False)

    def drain(self) -> None:
        """Take every count the other parts have sent (the selector said the socket is readable)."""
        while True:
            try:
                data = self.sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return
            try:
                q, n = (int(x) for x in data.split())
            except ValueError:
                continue
            if 0 <= q < self.parts:
                self.seen[q] = max(self.seen[q], n)

    def ready(self, ended: int) -> bool:
        """Every part has ended ``ended`` iterations."""
        self.drain()
        if not self._files_read and min(self.seen) < ended:
            self._files_read = True
            for q in range(self.parts):
                try:
                    self.seen[q] = max(self.seen[q], int((self.dir / str(q)).read_text() or 0))
                except (OSError, ValueError):
                    pass
        return min(self.seen) >= ended


def join_of(a: argparse.Namespace) -> Join | None:
    """The Join --join asks for (None: a rank on one rail)."""
    return Join(a.join, a.join_part, a.join_parts) if a.join else None


def sports_of(a: argparse.Namespace) -> list[int]:
    return [int(x) for x in a.sports.split(",") if x]


def run_job(a: argparse.Namespace, make: Callable[[], Any]) -> int:
    """One rank's life: ``make()`` builds it (after the signal handlers are in, so a stop that comes early
    still ends in a report), it connects, waits for --start-at, runs for the rest of --duration and its
    report goes to --out."""
    stop = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(flag=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(flag=True))
    job: JobRank = make()
    # the stop is looked at while connecting too: a rank whose peers are gone would otherwise wait out the
    # whole deadline, and the runner's SIGKILL (3 s after its SIGTERM) would leave no report
    job.connect(max(a.start_at, time.time()) + CONNECT_S, lambda: stop["flag"])
    while time.time() < a.start_at and not stop["flag"]:
        time.sleep(0.005)
    live = Live(a.out)  # the iterations done so far, for the live view (ranks keep them in job.iterations)

    def stopped() -> bool:  # asked on every pass of the rank's loop
        live.tick(len(getattr(job, "iterations", ())))
        return stop["flag"]

    rep = job.run(a.duration - max(0.0, time.time() - a.start_at) if a.start_at else a.duration, stopped)
    write_json(rep, a.out)
    return 0

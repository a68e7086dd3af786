"""Reachability from one host to many peers at once: one ICMP echo per (source address, peer), all sent
together from one process, answers awaited for ``--wait`` seconds. verify runs one of these per host
instead of one ``ping`` process per host pair (O(N) processes, not O(N^2)).

Each echo leaves through a raw socket bound to its source address, so the kernel's route lookup (and
the host's ECMP over its two ports) is the same as ``ping -I SRC DST``. Run inside a host namespace:
``python -m hpnlab.node.programs.reach --pairs SRC:DST,SRC:DST ... [--wait 1]``; prints {"SRC>DST": true|false}.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import struct
import sys
import time
from collections.abc import Callable

from hpnlab.node.inet import checksum


def echo(ident: int, seq: int) -> bytes:
    payload = b"hpnlab-reach"
    head = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    return struct.pack("!BBHHH", 8, 0, checksum(head + payload), ident, seq) + payload


def bound_socket(src: str) -> socket.socket:
    """A raw ICMP socket bound to ``src``, in the calling thread's namespace."""
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.bind((src, 0))
    s.setblocking(False)
    return s


def reach(pairs: list[tuple[str, str]], wait: float = 1.0) -> dict[str, bool]:
    return reach_groups([(bound_socket, pairs)], wait)


MAX_SOCKETS = 256  # per batch of groups: file descriptors stay far below a process's usual limit of 1,024


def reach_groups(groups: list[tuple[Callable[[str], socket.socket], list[tuple[str, str]]]],
                 wait: float = 1.0) -> dict[str, bool]:
    """Several senders at once: each group opens its sockets with its own opener (the controller's opens
    them inside one host's namespace each) and has its own ICMP identifier, so up to 65,535 pairs per
    group and any number of groups, in batches of at most MAX_SOCKETS sockets that each share one wait.
    Source addresses are unique across groups."""
    result: dict[str, bool] = {}
    batch: list[tuple[int, Callable, list[tuple[str, str]]]] = []
    nsocks = 0
    for g, (opener, pairs) in enumerate(groups):
        srcs = len({s for s, _d in pairs})
        if batch and nsocks + srcs > MAX_SOCKETS:
            result.update(_reach_batch(batch, wait))
            batch, nsocks = [], 0
        batch.append((g, opener, pairs))
        nsocks += srcs
    if batch:
        result.update(_reach_batch(batch, wait))
    return result


RESEND_S = 0.2  # a pair that has not answered gets another echo this often, until the wait ends


def _reach_batch(batch: list[tuple[int, Callable, list[tuple[str, str]]]], wait: float) -> dict[str, bool]:
    """One echo per pair, then another every RESEND_S to the pairs that have not answered yet, until every
    pair has answered or ``wait`` has passed since the first round went out (as ping keeps sending: a path
    that comes up during the wait counts, and the wait is not spent waiting for an echo that was dropped)."""
    base = os.getpid() & 0xFFFF
    socks: dict[str, tuple[socket.socket, int]] = {}  # src -> (socket, ident)
    pending: dict[tuple[int, int], str] = {}  # (ident, seq) -> "src>dst", every echo sent
    unanswered: dict[str, tuple[socket.socket, int, str]] = {}  # "src>dst" -> (socket, ident, dst)
    next_seq: dict[int, int] = {}  # ident -> the next sequence number free for it
    result: dict[str, bool] = {}

    def send(key: str, s: socket.socket, ident: int, dst: str) -> None:
        seq = next_seq.get(ident, 1)
        if seq > 0xFFFF:  # this group's sequence numbers are used up: no more echoes for it
            return
        next_seq[ident] = seq + 1
        try:
            s.sendto(echo(ident, seq), (dst, 0))
            pending[(ident, seq)] = key
        except OSError:
            pass  # no route (yet): unreachable unless a later echo gets through

    try:
        for g, opener, pairs in batch:
            ident = (base + g) & 0xFFFF
            for src, dst in pairs:
                key = f"{src}>{dst}"
                result[key] = False
                if src not in socks:
                    try:
                        socks[src] = (opener(src), ident)
                    except OSError:  # the address is gone (or not there yet): nothing from it answers
                        continue
                unanswered[key] = (socks[src][0], ident, dst)
                send(key, *unanswered[key])
        by_fd = {s.fileno(): (s, ident) for s, ident in socks.values()}
        poller = select.poll()  # not select(): no limit on the descriptors' numbers
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        now = time.monotonic()
        deadline, resend = now + wait, now + RESEND_S
        while unanswered and (now := time.monotonic()) < deadline:
            if now >= resend:
                for key, (s, ident, dst) in list(unanswered.items()):
                    send(key, s, ident, dst)
                resend = now + RESEND_S
            for fd, _ev in poller.poll(max(0.0, min(deadline, resend) - now) * 1000):
                s, ident = by_fd[fd]
                while True:
                    try:
                        pkt, (addr, _port) = s.recvfrom(2048)
                    except (BlockingIOError, InterruptedError):
                        break
                    ihl = (pkt[0] & 0x0F) * 4
                    if len(pkt) < ihl + 8:
                        continue
                    typ, _code, _ck, pid, seq = struct.unpack_from("!BBHHH", pkt, ihl)
                    key = pending.get((pid, seq))
                    if typ == 0 and pid == ident and key and key.split(">")[1] == addr:
                        result[key] = True
                        unanswered.pop(key, None)
    finally:
        for s, _ident in socks.values():
            s.close()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpnlab.node.programs.reach", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", required=True, help="comma-separated SRC:DST addresses")
    p.add_argument("--wait", type=float, default=1.0, help="seconds to wait for the answers")
    a = p.parse_args(argv)
    pairs = [tuple(x.split(":", 1)) for x in a.pairs.split(",") if x]
    json.dump(reach(pairs, a.wait), sys.stdout)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())

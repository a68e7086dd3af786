"""All-to-all as a training job's collective (a mixture-of-experts layer's exchange), iteration after
iteration: one rank per host, every rank keeps ``--conns`` TCP connections to every other rank, and an
iteration is each rank's buffer of ``--size`` bytes split into n parts, part p sent to rank p (its own part
stays local) and as much received from every other rank. A rank's iteration ends when every other rank's
part of it has arrived, so, as in a ring, no rank runs ahead of the slowest peer by more than an iteration.

Why not the ``alltoall`` workload's program (hpnlab.node.programs.elephant): that is one round whose delivery is
a receiver closing the connection; a job repeats the exchange on connections that stay open (no slow start
again every iteration, as NCCL's stay), so delivery is counted instead: a peer's part is split evenly over
its connections, and iteration k has arrived on a connection once (k+1) x its share has.

As the ring all-reduce (hpnlab.node.programs.allreduce) has them: ``--compute-ms`` of GPU work, emulated by waiting,
begins every iteration (the report's ``computed`` says when each one's compute ended); ``--sports`` binds the
outgoing connections, peer by peer in rank order and ``--conns`` per peer, to those source ports (the path
map's placement); ``--iterations`` stops the rank after that many; ``--dscp`` marks every connection at both
ends; ``--congestion`` sets every connection's TCP congestion control; with ``--join`` the rank is one rail's
part of a rank on several rails: its next iteration begins only when every rail's part has ended this one
(hpnlab.node.programs.jobrun.Join).
"""

from __future__ import annotations

import argparse
import selectors
import socket
import struct
import sys
import time

from hpnlab.node.programs import dscp, jobrun, tcpcc

HELLO = struct.Struct("!II")  # the connecting rank, its connection index to this peer
BUF = 1 << 16


def shares(per_peer: int, conns: int) -> list[int]:
    """Bytes each of a peer's connections carries per iteration: an even split, the remainder on the first."""
    base = per_peer // conns
    return [base + (per_peer - base * conns if c == 0 else 0) for c in range(conns)]


class Out:
    """An outgoing connection: the bytes owed to it (queued by iterations, not yet in the kernel)."""

    def __init__(self, sock: socket.socket, peer: int, idx: int):
        self.sock, self.peer, self.idx = sock, peer, idx
        self.owed = 0
        self.dead = False


class In:
    """An incoming connection: the bytes received on it, all iterations counted together."""

    def __init__(self, sock: socket.socket, peer: int, share: int):
        self.sock, self.peer, self.share = sock, peer, share
        self.got = 0
        self.eof = False


class AllToAll:
    def __init__(self, rank: int, addrs: list[str], port: int, size: int, conns: int,
                 congestion: str = tcpcc.DEFAULT, dscp_: int | None = None, compute: float = 0.0,
                 sports: list[int] | None = None, iterations: int | None = None, join: jobrun.Join | None = None):
        self.rank, self.addrs, self.port = rank, addrs, port
        self.join = join  # the rank's other rails (None: one rail): each iteration begins when all have ended
        self.n = len(addrs)
        self.conns = conns
        self.per_peer = size // self.n  # the part of this rank's buffer each other rank gets
        self.shares = shares(self.per_peer, conns)
        self.congestion, self.dscp = congestion, dscp_
        self.compute = compute
        self.sports = sports or []
        self.max_iterations = iterations
        self.peers = [p for p in range(self.n) if p != rank]
        self.out: list[Out] = []
        self.inc: list[In] = []
        self.payload = memoryview(bytes(BUF))
        self.buf = bytearray(BUF)

    # --- setup ---------------------------------------------------------------------------------------------
    def connect(self, deadline: float, stop_flag=lambda: False) -> None:
        """Until every connection is up, the deadline (SystemExit), or a stop (run() then reports at once)."""
        me = self.addrs[self.rank]
        lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcpcc.use(lsock, self.congestion)  # accepted connections inherit it
        dscp.mark(lsock, self.dscp)  # and its TOS: the receiver's ACKs carry the class too
        lsock.bind((me, self.port))
        lsock.listen(256)
        lsock.settimeout(0.05)
        todo = [(p, c) for p in self.peers for c in range(self.conns)]  # the order --sports names them in
        want_in = len(todo)
        sport_of = {pc: (self.sports[i] if i < len(self.sports) else 0) for i, pc in enumerate(todo)}
        while todo or len(self.inc) < want_in:
            if stop_flag():
                break
            if time.time() > deadline:
                raise SystemExit(f"rank {self.rank}: all-to-all not connected by the deadline "
                                 f"({len(self.out)} out, {len(self.inc)} of {want_in} in)")
            for p, c in list(todo):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                tcpcc.use(s, self.congestion)
                dscp.mark(s, self.dscp)
                # One source port may serve several peers (the path map probes each pair's pool alike): the
                # four-tuples differ, and SO_REUSEADDR on every one lets them bind it (and a repetition's
                # TIME_WAIT stays out of the way).
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((me, sport_of[(p, c)]))
                s.settimeout(0.2)
                try:
                    s.connect((self.addrs[p], self.port))
                    s.sendall(HELLO.pack(self.rank, c))
                except OSError:
                    s.close()
                    continue
                self.out.append(Out(s, p, c))
                todo.remove((p, c))
            try:
                while len(self.inc) < want_in:
                    s, _ = lsock.accept()
                    tcpcc.use(s, self.congestion)  # a check: it has the listener's already
                    dscp.mark(s, self.dscp)
                    s.settimeout(2)
                    peer, c = HELLO.unpack(s.recv(HELLO.size, socket.MSG_WAITALL))
                    self.inc.append(In(s, peer, self.shares_of(c)))
            except (socket.timeout, OSError, struct.error):
                pass
        lsock.close()
        for s in [o.sock for o in self.out] + [i.sock for i in self.inc]:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setblocking(False)

    def shares_of(self, c: int) -> int:
        # every rank's buffer is the same size, so a peer's connection c carries what ours would
        return self.shares[c] if 0 <= c < len(self.shares) else 0

    # --- the exchange --------------------------------------------------------------------------------------
    def flush(self) -> None:
        for o in self.out:
            while o.owed > 0 and not o.dead:
                try:
                    n = o.sock.send(self.payload[:min(BUF, o.owed)])
                except BlockingIOError:
                    break
                except OSError:
                    o.dead = True  # the peer is gone (it finished its run): nothing more can reach it
                    break
                o.owed -= n

    def read(self, i: In) -> None:
        try:
            n = i.sock.recv_into(self.buf)
        except BlockingIOError:
            return
        except OSError:
            n = 0
        if n:
            i.got += n
        else:
            i.eof = True

    def arrived(self, k: int) -> bool:
        """Iteration k (0-based) has arrived from every other rank."""
        return all(i.got >= (k + 1) * i.share for i in self.inc)

    def run(self, duration: float, stop_flag) -> dict:
        sel = selectors.DefaultSelector()
        for i in self.inc:
            sel.register(i.sock, selectors.EVENT_READ, i)
        if self.join is not None:  # a waiting part wakes when the last of its rails ends the iteration
            sel.register(self.join, selectors.EVENT_READ, self.join)
        t_start = time.time()
        end = time.monotonic() + duration
        iterations: list[float] = []
        self.iterations = iterations  # read by the live view (jobrun.run_job)
        computed: list[float] = []
        k = 0  # the iteration in progress
        held = True  # its compute is not done yet
        hold_until: float | None = time.monotonic() + self.compute  # None: waiting for the other rails (Join)
        while time.monotonic() < end and not stop_flag():
            now = time.monotonic()
            if held and hold_until is None and self.join.ready(k):
                hold_until = now + self.compute
            if held and hold_until is not None and now >= hold_until:
                computed.append(time.time())
                for o in self.out:
                    o.owed += self.shares[o.idx]
                held = False
            self.flush()
            wait = 0.001 if any(o.owed and not o.dead for o in self.out) else 0.01
            if held and hold_until is not None:  # (waiting on the other rails: the join's socket wakes it)
                wait = max(0.0, min(wait, hold_until - time.monotonic()))
            for key, _ev in sel.select(timeout=wait):
                if key.data is self.join:
                    self.join.drain()
                    continue
                self.read(key.data)
                if key.data.eof:
                    sel.unregister(key.fileobj)
            if not held and self.arrived(k):
                iterations.append(time.time())
                k += 1
                if self.max_iterations is not None and k >= self.max_iterations:
                    break
                if self.join is not None:
                    self.join.arrive(k)
                held, hold_until = True, (time.monotonic() + self.compute if self.join is None else None)
            if self.inc and all(i.eof for i in self.inc) and not self.arrived(k):
                break  # every peer has gone: nothing more will arrive
        if self.max_iterations is not None and k >= self.max_iterations:
            # Done by count: the last iteration's bytes this rank still owes its peers must reach the kernel
            # before the sockets close (the kernel then delivers them), or a peer never completes its count.
            drain_end = time.monotonic() + 5.0
            while time.monotonic() < drain_end and any(o.owed and not o.dead for o in self.out):
                self.flush()
                time.sleep(0.002)
        ran = tcpcc.summary(tcpcc.of(s) for s in [o.sock for o in self.out] + [i.sock for i in self.inc])
        for s in [o.sock for o in self.out] + [i.sock for i in self.inc]:
            s.close()
        return {"kind": "alltoall-job", "rank": self.rank, "addr": self.addrs[self.rank], "ranks": self.n,
                "connections": self.conns, "bytes_per_peer": self.per_peer,
                "bytes_per_iteration": self.per_peer * len(self.peers),
                "bytes_received": sum(i.got for i in self.inc), "start": t_start, "until": t_start + duration,
                "iterations": iterations, "computed": computed, "congestion": ran, "dscp": self.dscp,
                "compute_s": self.compute, "sports": self.sports}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpnlab.node.programs.alltoall", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--addrs", required=True, help="comma-separated rank addresses, rank order")
    p.add_argument("--port", type=int, default=17000, help="every rank listens on this port")
    p.add_argument("--size", type=int, default=1 << 20, help="bytes of each rank's buffer; size/n to every rank")
    p.add_argument("--conns", type=int, default=1, help="connections to every other rank")
    jobrun.add_common_args(p)
    jobrun.add_job_args(p, "comma-separated source ports of the outgoing connections: per other rank in rank "
                           "order, --conns each")
    a = p.parse_args(argv)
    addrs = a.addrs.split(",")
    if not 0 <= a.rank < len(addrs) or len(addrs) < 2:
        p.error("--rank must index --addrs, which needs at least two addresses")
    return jobrun.run_job(a, lambda: AllToAll(a.rank, addrs, a.port, a.size, a.conns, congestion=a.congestion,
                                              dscp_=a.dscp, compute=a.compute_ms / 1000,
                                              sports=jobrun.sports_of(a), iterations=a.iterations,
                                              join=jobrun.join_of(a)))

if __name__ == "__main__":
    sys.exit(main())

"""Ring all-reduce: a training-like workload whose iteration rate is the "training throughput" of the
paper's Fig. 18.

Ranks (one per host, on one rail) form a ring; an iteration is 2(n-1) synchronised steps, each sending
size/n bytes to the next rank and waiting for the same from the previous one, so one stuck connection
stalls the whole ring, as in training. Two ways to carry a step (DESIGN: dual-plane meets dual-ToR):

- ``one``: a single TCP connection per peer, plain per-flow ECMP hashing;
- ``least-loaded``: several connections per peer (different source ports, so different paths); every
  segment goes to the connection with the fewest unacknowledged bytes (SIOCOUTQ), and a connection whose
  acknowledgements stop moving is drained: its unacknowledged segments are re-sent on the others
  (the receiver drops duplicates), the host-side path selection of the paper's §6.1 / Appendix B.

With ``--timeout`` a rank is a job with a collective timeout, as NCCL's and gloo's are: when one all-reduce
(an iteration) has not completed that many seconds after it began, the rank aborts, and its report says
when (``aborted``). Without it the rank waits as long as the run lasts.

With ``--compute-ms`` every iteration begins with that much GPU work, emulated by waiting (the rank keeps
reading its sockets meanwhile, as a GPU's NIC keeps receiving); its report's ``computed`` says when each
iteration's compute ended, so what is left of the iteration is its exposed communication. ``--sports``
binds the outgoing connections to those source ports (the path map's placement); ``--iterations`` stops
the rank after that many. With ``--join`` the rank is one rail's part of a rank on several rails: its next
iteration begins only when every rail's part has ended this one (hpnlab.node.programs.jobrun.Join).

Every connection runs ``--congestion`` (default cubic; hpnlab.node.programs.tcpcc: set per socket, a refusal exits 1)
and the report says which algorithm they ran (``congestion``). With ``--dscp`` every connection is marked
with that DSCP at both ends (hpnlab.node.programs.dscp), the job's traffic class at the switches' queues.
"""

from __future__ import annotations

import argparse
import collections
import errno
import fcntl
import selectors
import socket
import struct
import sys
import time

from hpnlab.node.programs import dscp, jobrun, tcpcc

FRAME = struct.Struct("!IIII")  # step, segment, segments in step, payload length
SIOCOUTQ = 0x5411
HELLO = struct.Struct("!II")


class Conn:
    def __init__(self, sock: socket.socket, idx: int):
        self.sock = sock
        self.idx = idx
        self.pending: collections.deque = collections.deque()  # [key, frame memoryview, bytes written]
        self.inflight: collections.deque = collections.deque()  # (stream end offset, key, frame) in the kernel
        self.written = 0
        self.acked = 0
        self.progress_at = time.monotonic()
        self.stalled = False
        self.stalls = 0
        self.dead = False  # reset by the peer (it finished its run first)
        self.rbuf = bytearray()

    def outq(self) -> int:
        try:
            return struct.unpack("i", fcntl.ioctl(self.sock.fileno(), SIOCOUTQ, b"\0\0\0\0"))[0]
        except OSError:
            return 0

    def load(self) -> int:
        return self.outq() + sum(len(f) - w for _k, f, w in self.pending)

    def update_acks(self, now: float) -> None:
        acked = self.written - self.outq()
        if acked > self.acked:
            self.acked = acked
            self.progress_at = now
            self.stalled = False
        while self.inflight and self.inflight[0][0] <= self.acked:
            self.inflight.popleft()
        if not self.inflight and not self.pending:
            self.progress_at = now

    def flush(self) -> None:
        while self.pending:
            item = self.pending[0]
            key, frame, w = item
            try:
                n = self.sock.send(frame[w:])
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.ENOBUFS):
                    return
                if e.errno in (errno.EPIPE, errno.ECONNRESET):
                    self.dead = True
                    self.pending.clear()
                    return
                raise
            item[2] += n
            self.written += n
            if item[2] == len(frame):
                self.pending.popleft()
                self.inflight.append((self.written, key, frame))
            else:
                return


class Watchdog:
    """A collective timeout: ``expired`` says how long the operation begun last has blocked once that is
    longer than ``timeout`` seconds (None: never, the default)."""

    def __init__(self, timeout: float | None):
        self.timeout = timeout
        self.began = 0.0

    def begin(self, now: float) -> None:
        self.began = now

    def expired(self, now: float) -> float | None:
        blocked = now - self.began
        return blocked if self.timeout is not None and blocked > self.timeout else None


class Ring:
    def __init__(self, rank: int, addrs: list[str], port: int, size: int, conns: int, select: str,
                 segment: int = 65536, stall: float = 0.15, congestion: str = tcpcc.DEFAULT,
                 timeout: float | None = None, dscp: int | None = None, compute: float = 0.0,
                 sports: list[int] | None = None, iterations: int | None = None, join: jobrun.Join | None = None):
        self.rank, self.addrs, self.port = rank, addrs, port
        self.compute = compute  # seconds of emulated GPU work at the start of every iteration
        self.join = join  # the rank's other rails (None: one rail): each iteration begins when all have ended
        self.sports = sports or []  # outgoing connection i binds sports[i] (0: the kernel's choice)
        self.max_iterations = iterations
        self.dscp = dscp  # every connection's DSCP, both ends (None: unmarked)
        self.watchdog = Watchdog(timeout)
        self.congestion = congestion  # every connection's TCP congestion control (set per socket)
        self.n = len(addrs)
        self.chunk = max(1, size // self.n)
        self.conns_wanted = conns if select == "least-loaded" else 1
        self.select = select
        self.segment = segment
        self.stall = stall
        self.payload = bytes(segment)
        self.out: list[Conn] = []
        self.local_ports: list[int] = []  # the outgoing connections' source ports, once connected
        self.inc: list[Conn] = []
        self.received: dict[int, set[int]] = collections.defaultdict(set)  # step -> segments seen
        self.nseg: dict[int, int] = {}  # step -> segments in it
        self.step = 0
        self.resent = 0
        self.dups = 0

    # --- setup ---------------------------------------------------------------------------------------------
    def connect(self, deadline: float, stop_flag=lambda: False) -> None:
        """Until every connection is up, the deadline (SystemExit), or a stop (run() then reports at once)."""
        me, nxt = self.addrs[self.rank], self.addrs[(self.rank + 1) % self.n]
        lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcpcc.use(lsock, self.congestion)  # accepted connections inherit it
        dscp.mark(lsock, self.dscp)  # so do they its TOS: the SYN-ACK and every ACK carry the class too
        lsock.bind((me, self.port))
        lsock.listen(64)
        lsock.settimeout(0.05)
        while len(self.out) < self.conns_wanted or len(self.inc) < self.conns_wanted:
            if stop_flag():
                break
            if time.time() > deadline:
                raise SystemExit(f"rank {self.rank}: ring not connected by the deadline "
                                 f"({len(self.out)} out, {len(self.inc)} in)")
            if len(self.out) < self.conns_wanted:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                tcpcc.use(s, self.congestion)
                dscp.mark(s, self.dscp)
                if len(self.out) < len(self.sports):
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a repetition's earlier TIME_WAIT
                s.bind((me, self.sports[len(self.out)] if len(self.out) < len(self.sports) else 0))
                s.settimeout(0.2)
                try:
                    s.connect((nxt, self.port))
                    s.sendall(HELLO.pack(self.rank, len(self.out)))
                    self.out.append(Conn(s, len(self.out)))
                except OSError:
                    s.close()
            try:
                c, _ = lsock.accept()
                tcpcc.use(c, self.congestion)  # a check: it has the listener's already
                dscp.mark(c, self.dscp)
                c.settimeout(2)
                c.recv(HELLO.size, socket.MSG_WAITALL)
                self.inc.append(Conn(c, len(self.inc)))
            except (socket.timeout, OSError):
                pass
        lsock.close()
        # the source ports the outgoing connections have (the kernel's where --sports gave none): a path
        # check re-probes these 5-tuples after the run (hpnlab.traffic.run.pathcheck)
        self.local_ports = [c.sock.getsockname()[1] for c in self.out]
        for c in self.out + self.inc:
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c.sock.setblocking(False)

    # --- sending -------------------------------------------------------------------------------------------
    def pick(self, exclude: Conn | None = None) -> Conn:
        live = [c for c in self.out if not c.dead] or self.out
        cands = [c for c in live if c is not exclude and not c.stalled] or \
                [c for c in live if c is not exclude] or live
        return min(cands, key=Conn.load) if len(cands) > 1 else cands[0]

    def send_step(self, step: int) -> None:
        nseg = -(-self.chunk // self.segment)
        left = self.chunk
        for seg in range(nseg):
            ln = min(self.segment, left)
            left -= ln
            frame = memoryview(FRAME.pack(step, seg, nseg, ln) + self.payload[:ln])
            self.pick().pending.append([(step, seg), frame, 0])

    def check_stalls(self, now: float) -> None:
        if self.select != "least-loaded" or len(self.out) < 2:
            return
        for c in self.out:
            c.update_acks(now)
            if not c.stalled and (c.inflight or c.pending) and now - c.progress_at > self.stall:
                c.stalled = True
                c.stalls += 1
                # Everything not yet acknowledged on it goes to the other connections again.
                keep = collections.deque()
                moved = [(k, f) for _e, k, f in c.inflight]
                for item in c.pending:
                    if item[2] > 0:
                        keep.append(item)  # a frame half in the byte stream must be finished there
                        moved.append((item[0], item[1]))
                    else:
                        moved.append((item[0], item[1]))
                c.pending = keep
                for k, f in moved:
                    self.pick(exclude=c).pending.append([k, f, 0])
                    self.resent += 1

    # --- receiving -----------------------------------------------------------------------------------------
    def on_readable(self, c: Conn) -> bool:
        try:
            data = c.sock.recv(1 << 20)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        c.rbuf += data
        while len(c.rbuf) >= FRAME.size:
            step, seg, nseg, ln = FRAME.unpack_from(c.rbuf)
            if len(c.rbuf) < FRAME.size + ln:
                break
            del c.rbuf[:FRAME.size + ln]
            if step < self.step or seg in self.received[step]:  # a copy re-sent elsewhere got there first
                self.dups += 1
                continue
            self.received[step].add(seg)
            self.nseg[step] = nseg
        return True

    def step_done(self, step: int) -> bool:
        return step in self.nseg and len(self.received[step]) >= self.nseg[step]

    # --- main loop -----------------------------------------------------------------------------------------
    def run(self, duration: float, stop_flag) -> dict:
        sel = selectors.DefaultSelector()
        for c in self.inc:
            sel.register(c.sock, selectors.EVENT_READ, c)
        if self.join is not None:  # a waiting part wakes when the last of its rails ends the iteration
            sel.register(self.join, selectors.EVENT_READ, self.join)
        steps_per_iter = 2 * (self.n - 1)
        t_start = time.time()
        end = time.monotonic() + duration
        iterations: list[float] = []
        self.iterations = iterations  # read by the live view (jobrun.run_job)
        computed: list[float] = []  # when each iteration's compute ended (wall clock)
        aborted = None
        step = self.step = 0
        self.watchdog.begin(time.monotonic())
        # An iteration's first step waits for its compute: held until hold_until (monotonic). On several rails
        # the compute begins when every rail's part has ended the iteration before (hold_until None till then).
        held: int | None = step
        hold_until: float | None = time.monotonic() + self.compute
        while time.monotonic() < end and not stop_flag():
            if held is not None and hold_until is None and self.join.ready(len(iterations)):
                hold_until = time.monotonic() + self.compute
            if held is not None and hold_until is not None and time.monotonic() >= hold_until:
                computed.append(time.time())
                self.send_step(held)
                held = None
            for c in self.out:
                c.flush()
            if all(c.dead for c in self.out) and self.watchdog.timeout is None:
                # The next rank finished its run first. With a timeout the rank waits for its watchdog
                # instead: a neighbour that aborted is what a collective library's timeout reports.
                break
            want_write = any(c.pending for c in self.out)
            wait = 0.001 if want_write else 0.01
            if held is not None and hold_until is not None:  # (waiting on the other rails: the join's socket wakes it)
                wait = max(0.0, min(wait, hold_until - time.monotonic()))
            for key, _ev in sel.select(timeout=wait):
                if key.data is self.join:
                    self.join.drain()
                    continue
                if not self.on_readable(key.data):
                    sel.unregister(key.fileobj)
            now = time.monotonic()
            self.check_stalls(now)
            while held is None and self.step_done(step):
                self.received.pop(step, None)
                self.nseg.pop(step, None)
                step = self.step = step + 1
                if step % steps_per_iter == 0:
                    iterations.append(time.time())
                    self.watchdog.begin(now)
                    if self.max_iterations is not None and len(iterations) >= self.max_iterations:
                        break
                    if self.join is not None:
                        self.join.arrive(len(iterations))
                        held, hold_until = step, None  # until every rail has ended it, then the compute
                        break
                    if self.compute > 0:
                        held, hold_until = step, now + self.compute
                        break
                    computed.append(time.time())  # no compute: the next iteration's traffic starts at once
                self.send_step(step)
            if self.max_iterations is not None and len(iterations) >= self.max_iterations:
                break
            blocked = self.watchdog.expired(time.monotonic())
            if blocked is not None:
                # The job dies here, as a rank of NCCL or gloo does: no retry, the sockets close on exit.
                aborted = {"at": time.time(), "blocked_s": round(blocked, 3), "step": step,
                           "iteration": step // steps_per_iter, "timeout_s": self.watchdog.timeout}
                break
        if self.max_iterations is not None and len(iterations) >= self.max_iterations:
            # Done by count: what this rank still owes the next one (its last step, sent as it finished
            # receiving) must leave before the sockets close, or the next rank never completes its count.
            drain_end = time.monotonic() + 5.0
            while time.monotonic() < drain_end and any((c.pending or c.outq()) and not c.dead for c in self.out):
                for c in self.out:
                    c.flush()
                time.sleep(0.002)
        ran = tcpcc.summary(tcpcc.of(c.sock) for c in self.out + self.inc)
        for c in self.out + self.inc:
            c.sock.close()
        return {"kind": "allreduce", "rank": self.rank, "addr": self.addrs[self.rank], "ranks": self.n,
                "select": self.select, "connections": len(self.out), "bytes_per_iteration": self.chunk * steps_per_iter,
                "start": t_start, "until": t_start + duration,  # the run's end: the GPU utilisation's window
                "iterations": iterations, "steps": step, "resent_segments": self.resent,
                "duplicate_segments": self.dups, "stalls": [c.stalls for c in self.out], "congestion": ran,
                "timeout_s": self.watchdog.timeout, "aborted": aborted, "dscp": self.dscp,
                "compute_s": self.compute, "computed": computed, "sports": self.sports,
                "local_ports": self.local_ports, "next": self.addrs[(self.rank + 1) % self.n]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpnlab.node.programs.allreduce", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--addrs", required=True, help="comma-separated rank addresses, ring order")
    p.add_argument("--port", type=int, default=17000)
    p.add_argument("--size", type=int, default=1 << 21, help="bytes all-reduced per iteration")
    p.add_argument("--conns", type=int, default=4)
    p.add_argument("--select", choices=["one", "least-loaded"], default="least-loaded")
    p.add_argument("--timeout", type=float, default=None,
                   help="abort when one all-reduce has not completed this many seconds after it began")
    jobrun.add_common_args(p)
    jobrun.add_job_args(p, "comma-separated source ports of the outgoing connections")
    a = p.parse_args(argv)
    return jobrun.run_job(a, lambda: Ring(a.rank, a.addrs.split(","), a.port, a.size, a.conns, a.select,
                                          congestion=a.congestion, timeout=a.timeout, dscp=a.dscp,
                                          compute=a.compute_ms / 1000, sports=jobrun.sports_of(a),
                                          iterations=a.iterations, join=jobrun.join_of(a)))

if __name__ == "__main__":
    sys.exit(main())

"""The slip guard's node side: the longest intervals between a protocol's packets, per stream.

A detector declares its peer gone after a silence of its detection time (BFD: interval x multiplier; LACP's
short timeout: 3 periods). When the emulator's CPU runs late, a sender's timer fires late and the silence
grows without any fault: past the detection time the protocol sees a failure that is the machine's. So
each agent keeps, per stream (a port's received LACPDUs; a BFD session's packets, each direction, seen by
the ToR's capture), every interval at or above the stream's threshold (a long interval is rare on a
healthy lab, so the record is small) with the wall-clock time it ended, and a stream silent since its last
packet for longer than the threshold as an open interval. The controller judges them against the
detection time (hpnlab.traffic.analysis.slip). Standard library only: it runs inside every node.
"""

from __future__ import annotations

import ctypes
import socket
import struct
import time
from collections import deque

KEEP = 1000  # long intervals kept (the most recent)
BFD_PORT = 3784  # single-hop BFD control (RFC 5881); bfdd's sessions of the BGP unnumbered links (IPv6)
ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26
PACKET_OUTGOING = 4
# asm-generic/socket.h: SO_TIMESTAMPNS (the _OLD one, a struct timespec of two longs); the control message it
# brings has the same number (SCM_TIMESTAMPNS). Python's socket module names neither.
SO_TIMESTAMPNS = 35
TIMESPEC = struct.Struct("qq")


class Gaps:
    """Intervals at or above a stream's threshold between its packets, as [end (epoch s), ms, stream]."""

    def __init__(self, keep: int = KEEP) -> None:
        self.last: dict[str, float] = {}
        self.threshold: dict[str, float] = {}
        self.long: deque[list] = deque(maxlen=keep)
        self.packets = 0

    def seen(self, stream: str, t: float, threshold_s: float) -> None:
        self.packets += 1
        prev = self.last.get(stream)
        self.last[stream], self.threshold[stream] = t, threshold_s
        if prev is not None and t - prev >= threshold_s:
            self.long.append([round(t, 3), round((t - prev) * 1000, 1), stream])

    def report(self, now: float | None = None) -> dict:
        """JSON: the long intervals, the streams' thresholds (ms) and the ones silent past theirs now."""
        now = time.time() if now is None else now
        open_ = [[round(now, 3), round((now - t) * 1000, 1), s] for s, t in sorted(self.last.items())
                 if now - t >= self.threshold[s]]
        return {"long": list(self.long), "open": open_, "packets": self.packets,
                "threshold_ms": {s: round(v * 1000, 1) for s, v in sorted(self.threshold.items())}}


GAPS = Gaps()  # this agent's record, in every status file it writes (hpnlab.node.agents.agent.StatusFile)


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


# Classic BPF: keep a frame only if it is UDP to the BFD port, over IPv6 (no extension header: bfdd's) or
# IPv4 (not a fragment). Every other frame of the interface is dropped in the kernel, unread.
_LDH, _LDB, _JEQ, _JSET, _RET, _LDXB_MSH, _LDH_IND = 0x28, 0x30, 0x15, 0x45, 0x06, 0xb1, 0x48
BFD_FILTER = b"".join([
    _insn(_LDH, 0, 0, 12),            # 0: ethertype
    _insn(_JEQ, 0, 4, 0x86DD),        # 1: IPv6 ? 2 : 6
    _insn(_LDB, 0, 0, 20),            # 2: next header
    _insn(_JEQ, 0, 11, 17),           # 3: UDP ? 4 : drop
    _insn(_LDH, 0, 0, 56),            # 4: UDP destination port (14 + 40 + 2)
    _insn(_JEQ, 8, 9, BFD_PORT),      # 5: accept : drop
    _insn(_JEQ, 0, 8, 0x0800),        # 6: IPv4 ? 7 : drop
    _insn(_LDB, 0, 0, 23),            # 7: protocol
    _insn(_JEQ, 0, 6, 17),            # 8: UDP ? 9 : drop
    _insn(_LDH, 0, 0, 20),            # 9: flags and fragment offset
    _insn(_JSET, 4, 0, 0x1FFF),       # 10: a fragment ? drop : 11
    _insn(_LDXB_MSH, 0, 0, 14),       # 11: x = IPv4 header length
    _insn(_LDH_IND, 0, 0, 16),        # 12: UDP destination port (14 + x + 2)
    _insn(_JEQ, 0, 1, BFD_PORT),      # 13: accept : drop
    _insn(_RET, 0, 0, 64),            # 14: accept (the headers are enough)
    _insn(_RET, 0, 0, 0),             # 15: drop
])


def bfd_socket(iface: str) -> socket.socket:
    """A packet socket on ``iface`` that sees the BFD control packets it receives and sends."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    buf = ctypes.create_string_buffer(BFD_FILTER)  # the kernel copies the program at the setsockopt
    s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack("HL", len(BFD_FILTER) // 8, ctypes.addressof(buf)))
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)  # each packet with the time the kernel took it in
    s.bind((iface, ETH_P_ALL))
    s.setblocking(False)
    return s


class BfdWatch:
    """A router's BFD sessions seen on the wire (one capture socket per fabric interface): per interface and
    direction, the intervals between control packets at or above ``threshold_s`` (``Gaps``)."""

    def __init__(self, ifaces: list[str], threshold_s: float, gaps: Gaps) -> None:
        self.threshold, self.gaps = threshold_s, gaps
        self.socks: dict[int, tuple[socket.socket, str]] = {}
        for ifc in ifaces:
            try:
                s = bfd_socket(ifc)
            except OSError:
                continue  # an interface gone: its session is down anyway, and BFD's own events say so
            self.socks[s.fileno()] = (s, ifc)

    def drain(self) -> None:
        """Every packet queued since the last drain, each at the time the kernel took it in (SO_TIMESTAMPNS).
        The agent calls it at its own pace: waking the agent's loop for each packet ran the loop's whole
        body some 40 times a second per ToR, enough on 2 cores to slow the lab's own failovers."""
        for s, ifc in self.socks.values():
            while True:
                try:
                    _data, anc, _flags, addr = s.recvmsg(64, socket.CMSG_SPACE(TIMESPEC.size))
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    break
                t = 0.0
                for level, kind, data in anc:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= TIMESPEC.size:
                        sec, ns = TIMESPEC.unpack_from(data)
                        t = sec + ns / 1e9
                way = "tx" if addr[2] == PACKET_OUTGOING else "rx"
                self.gaps.seen(f"bfd {ifc} {way}", t or time.time(), self.threshold)

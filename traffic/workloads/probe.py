"""The probe workload's command lines: a receiver and a sender of sequence-numbered UDP flows
(hpnlab.node.programs.probe), one port scheme for every caller.

Probe stream k of a run (or of a test's lab) listens on UDP 9000 + k and sends from source ports
20000 + 1000 k upward, one per flow; k wraps at 44, so every port stays below 65536 with the largest
flow count (1024). The scheme is the one the shipped experiments were measured with: the 5-tuples, and
so the ECMP paths the flows take, are the same as before it was shared.
"""

from __future__ import annotations

import sys

DPORT_BASE = 9000
SPORT_BASE = 20000
SPORT_STRIDE = 1000
STREAMS = 44  # streams before the scheme wraps: 20000 + 1000 * 43 + 1024 < 65536
MAX_FLOWS = 1024


def ports(k: int) -> tuple[int, int]:
    """(destination port, first source port) of probe stream ``k``."""
    k %= STREAMS
    return DPORT_BASE + k, SPORT_BASE + SPORT_STRIDE * k


def argv(k: int, src_ip: str, dst_ip: str, flows: int, rate: float, size: int, duration: float, start_at: float,
         rx_out: str, tx_out: str) -> tuple[list[str], list[str]]:
    """(receiver argv, sender argv) of probe stream ``k``; both start at the epoch time ``start_at``."""
    dport, sport = ports(k)
    py = sys.executable
    rx = [py, "-m", "hpnlab.node.programs.probe", "recv", "--bind", dst_ip, "--port", str(dport),
          "--duration", f"{duration + 1.5:g}", "--start-at", f"{start_at:.3f}", "--out", rx_out]
    tx = [py, "-m", "hpnlab.node.programs.probe", "send", "--src", src_ip, "--dst", dst_ip, "--dport", str(dport),
          "--flows", str(flows), "--rate", f"{rate:g}", "--size", str(size), "--sport-base", str(sport),
          "--duration", f"{duration:g}", "--start-at", f"{start_at:.3f}", "--out", tx_out]
    return rx, tx

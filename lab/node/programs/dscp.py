"""DSCP marking of a workload's sockets: the traffic class switches queue it by (the spec's ``qos``).

A socket is marked with ``IP_TOS`` (DSCP in the upper six bits of the TOS byte; the kernel keeps the two
ECN bits of a TCP socket its own). Linux does not reflect a connection's TOS in its replies (unless the
namespace sets ``tcp_reflect_tos``, which a lab does not), so both ends of every connection mark: the
sender's data and the receiver's ACKs then share a class. A listener's TOS is inherited by the connections
it accepts; the node programs mark those again, as a check.
"""

from __future__ import annotations

import socket

DSCP_MAX = 63
IP_TOS = getattr(socket, "IP_TOS", 1)  # linux/in.h


def tos_of(dscp: int) -> int:
    """The TOS byte of ``dscp`` with ECN bits 0."""
    if not 0 <= dscp <= DSCP_MAX:
        raise ValueError(f"DSCP {dscp} is not in 0..{DSCP_MAX}")
    return dscp << 2


def of(sock: socket.socket) -> int:
    """The DSCP the socket sends with (getsockopt IP_TOS, ECN bits dropped)."""
    return sock.getsockopt(socket.IPPROTO_IP, IP_TOS) >> 2


def mark(sock: socket.socket, dscp: int | None) -> int | None:
    """Mark the socket's packets with ``dscp`` (None: leave it unmarked, the kernel's 0). Raises SystemExit
    (the program exits 1 with this one line) when the socket reads back another DSCP: its figures would
    describe another class. Returns the DSCP in use (None when unmarked)."""
    if dscp is None:
        return None
    sock.setsockopt(socket.IPPROTO_IP, IP_TOS, tos_of(dscp))
    got = of(sock)
    if got != dscp:
        raise SystemExit(f"IP_TOS: asked for DSCP {dscp}, the socket sends DSCP {got}")
    return got


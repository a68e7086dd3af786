"""Small socket-level helpers for node tools: the Internet checksum (RFC 1071) of the packets they build
themselves (micro-BFD, ICMP echo), and receive buffers that the machine's shared cap cannot shrink."""

from __future__ import annotations

import socket
import struct

SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)


def checksum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def receive_buffer(sock: socket.socket, size: int) -> int:
    """Give ``sock`` a receive buffer of ``size`` bytes and return what the kernel granted.

    Forced first: a plain SO_RCVBUF request is capped at net.core.rmem_max, which every namespace shares
    with the machine (208 KiB by default), so a lab's own setting cannot raise it. Forcing needs
    CAP_NET_ADMIN, which node tools run with; without it (any OSError) the plain, capped request is made."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)

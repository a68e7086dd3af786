"""The Internet checksum (RFC 1071), for the packets node tools build themselves (micro-BFD, ICMP echo)."""

from __future__ import annotations

import struct


def checksum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF

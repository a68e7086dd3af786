"""Router Solicitations, sent from a controller thread inside a node's network namespace.

zebra answers a Router Solicitation with a Router Advertisement at once, where on its own it sends the
next one from a 1 s timer (or after its 3 s interval). The advertisement is what tells the router at the
other end of the link its neighbour's link-local address, and with it where BGP unnumbered connects: a
solicitation on every link of a lab that has just started makes the sessions come up now rather than at
some router's next timer tick. hpnlab.runtime.base.Runtime.open_fabric says when.
"""

from __future__ import annotations

import socket
from pathlib import Path

from hpnlab.node import nsenter

ND_ROUTER_SOLICIT = 133
# ICMPv6 type, code, checksum (the kernel fills it in on every ICMPv6 raw socket), 4 reserved bytes; no
# source link-layer option: the answer goes to all nodes anyway.
RS = bytes([ND_ROUTER_SOLICIT, 0, 0, 0, 0, 0, 0, 0])
ALL_ROUTERS = "ff02::2"
ND_HOP_LIMIT = 255  # RFC 4861: a receiver drops neighbour discovery that crossed a router (zebra does)


def solicit(netns: str | Path, ifaces: list[str]) -> dict[str, str]:
    """One Router Solicitation out of each of these interfaces of the namespace at ``netns``; returns the
    interfaces it could not send on, with the reason (an interface that is down, say)."""
    failed: dict[str, str] = {}
    with nsenter.entered(netns):  # the socket and the interface numbers are the namespace's
        sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
        index = {}
        for name in ifaces:
            try:
                index[name] = socket.if_nametoindex(name)
            except OSError as e:
                failed[name] = e.strerror or str(e)
    with sock:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, ND_HOP_LIMIT)
        for name, ifindex in index.items():
            try:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, ifindex)
                sock.sendto(RS, (ALL_ROUTERS, 0, 0, ifindex))
            except OSError as e:
                failed[name] = e.strerror or str(e)
    return failed

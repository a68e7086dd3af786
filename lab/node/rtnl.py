"""Raw rtnetlink for the agents: event sockets, message parsers, dumps, and the few writes they make
(a /32 into the import table, a port's admin state).

Standard library only. pyroute2 cost the ToR agent ~17 MiB of its ~24 MiB PSS, against ~9 MiB for the
host agent without it; the agents' netlink needs are a handful of fixed-layout messages.
"""

from __future__ import annotations

import errno
import itertools
import os
import socket
import struct

from hpnlab.node.inet import receive_buffer

RTMGRP_LINK, RTMGRP_NEIGH, RTMGRP_IPV4_ROUTE = 0x1, 0x4, 0x40
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26
RTM_NEWNEIGH, RTM_DELNEIGH, RTM_GETNEIGH = 28, 29, 30
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLMSG_HDRLEN = 16
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
NLM_F_REPLACE, NLM_F_CREATE = 0x100, 0x400
NDA_DST = 1
IFF_UP, IFF_LOWER_UP = 0x1, 0x10000
IFLA_IFNAME = 3
RTA_DST, RTA_OIF, RTA_TABLE = 1, 4, 15
RTN_UNICAST, RTN_BLACKHOLE = 1, 6
RT_SCOPE_UNIVERSE, RT_SCOPE_LINK, RT_SCOPE_NOWHERE = 0, 253, 255
TIMEOUT_S = 5.0  # a dump or write the kernel does not answer in this long raises (TimeoutError)

_seq = itertools.count(1)


def rtnl_socket(groups: int) -> socket.socket:
    """A raw rtnetlink socket subscribed to ``groups``, read straight from the agent's select loop
    (no reader thread, no library buffering between the kernel's event and the agent)."""
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)  # NETLINK_ROUTE
    receive_buffer(s, 1 << 20)
    s.bind((0, groups))
    s.setblocking(False)
    return s


def nl_messages(sock: socket.socket) -> tuple[list[tuple[int, bytes]], bool]:
    """Drain the socket: (message type, payload) of every message, and whether the kernel dropped some
    (ENOBUFS: the caller must then re-read the state it follows)."""
    msgs: list[tuple[int, bytes]] = []
    overrun = False
    while True:
        try:
            buf = sock.recv(1 << 16)
        except BlockingIOError:
            return msgs, overrun
        except OSError as e:
            if e.errno != errno.ENOBUFS:
                raise
            overrun = True
            continue
        msgs += split_nl(buf)


def split_nl(buf: bytes) -> list[tuple[int, bytes]]:
    out, off = [], 0
    while off + NLMSG_HDRLEN <= len(buf):
        length, mtype = struct.unpack_from("=IH", buf, off)
        if length < NLMSG_HDRLEN or off + length > len(buf):
            break
        out.append((mtype, buf[off + NLMSG_HDRLEN:off + length]))
        off += (length + 3) & ~3
    return out


def rtattrs(payload: bytes, off: int):
    """(type, value) of each rtnetlink attribute from ``off`` on (after the message's fixed header)."""
    while off + 4 <= len(payload):
        alen, atype = struct.unpack_from("=HH", payload, off)
        if alen < 4:
            return
        yield atype, payload[off + 4:off + alen]
        off += (alen + 3) & ~3


def parse_neigh(payload: bytes) -> tuple[int, int, str | None]:
    """ndmsg (family, ifindex, NUD state) and its NDA_DST -> (ifindex, state, IPv4 address or None)."""
    family = payload[0]
    ifindex, state = struct.unpack_from("=iH", payload, 4)
    dst = None
    for atype, value in rtattrs(payload, 12):
        if atype == NDA_DST and family == socket.AF_INET and len(value) == 4:
            dst = socket.inet_ntoa(value)
    return ifindex, state, dst



def parse_link(payload: bytes) -> tuple[str | None, bool]:
    """ifinfomsg and its IFLA_IFNAME -> (name, carrier): admin up and lower layer up, as the kernel
    reports in IFF_LOWER_UP (what /sys/class/net/X/carrier says, without a sysfs read)."""
    flags = struct.unpack_from("=I", payload, 8)[0]
    name = None
    for atype, value in rtattrs(payload, 16):
        if atype == IFLA_IFNAME:
            # the name is near the front of ~50 attributes (statistics, per-family blocks): a ToR agent's
            # carrier dump of the paper's segment spent a third of its idle CPU walking the rest
            name = value.split(b"\0", 1)[0].decode()
            break
    return name, bool(flags & IFF_UP) and bool(flags & IFF_LOWER_UP)


def link_states(msgs: list[tuple[int, bytes]]) -> dict[str, bool]:
    """Carrier of every link named in a batch of link notifications (a deleted link is down)."""
    out: dict[str, bool] = {}
    for mtype, payload in msgs:
        if mtype in (RTM_NEWLINK, RTM_DELLINK) and len(payload) >= 16:
            name, up = parse_link(payload)
            if name:
                out[name] = up and mtype == RTM_NEWLINK
    return out


def attr(atype: int, value: bytes) -> bytes:
    """One rtnetlink attribute, padded to 4 bytes."""
    a = struct.pack("=HH", 4 + len(value), atype) + value
    return a + b"\0" * (-len(a) % 4)


def message(mtype: int, flags: int, body: bytes, seq: int = 0) -> bytes:
    return struct.pack("=IHHII", NLMSG_HDRLEN + len(body), mtype, flags, seq, 0) + body


def _exchange(mtype: int, flags: int, body: bytes, sock: socket.socket | None = None) -> list[tuple[int, bytes]]:
    """Send one request and read its answer: every message of a dump, or the ACK. On a fresh socket of
    this namespace unless ``sock`` is given (one opened in another namespace; left open). A negative
    error in the answer raises OSError with that errno."""
    seq = next(_seq)
    s = sock or socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    s.settimeout(TIMEOUT_S)
    try:
        s.sendto(message(mtype, flags | NLM_F_REQUEST, body, seq), (0, 0))
        out: list[tuple[int, bytes]] = []
        while True:
            for rtype, payload in split_nl(s.recv(1 << 16)):
                if rtype == NLMSG_DONE:
                    return out
                if rtype == NLMSG_ERROR:
                    err = -struct.unpack_from("=i", payload)[0]
                    if err:
                        raise OSError(err, f"{os.strerror(err)} (netlink message type {mtype})")
                    return out  # the ACK of a write
                out.append((rtype, payload))
    finally:
        if sock is None:
            s.close()


def dump(mtype: int, body: bytes, sock: socket.socket | None = None) -> list[tuple[int, bytes]]:
    return _exchange(mtype, NLM_F_DUMP, body, sock)


def link_names(sock: socket.socket | None = None) -> dict[int, str]:
    """ifindex -> name of every link (of this namespace, or of the one ``sock`` lives in)."""
    msgs = dump(RTM_GETLINK, struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0), sock)
    return {struct.unpack_from("=i", p, 4)[0]: name for t, p in msgs
            if t == RTM_NEWLINK and len(p) >= 16 and (name := parse_link(p)[0])}


def dump_links() -> dict[str, bool]:
    """Carrier of every link of this namespace, from one RTM_GETLINK dump.

    Not sysfs: on this kernel a read of /sys/class/net/X/carrier retries for as long as another process
    holds the RTNL lock, and zebra installing routes holds it most of the time while a large lab
    converges. A ToR agent reading its 128 host ports that way missed its heartbeat by 5-9 s on the
    paper's segment, let LACP expire, and the withdrawn host routes fed the routing load that starved it."""
    return link_states(dump(RTM_GETLINK, struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0)))


def dump_neighbours(family: int = socket.AF_INET) -> list[tuple[int, int, str | None]]:
    """(ifindex, NUD state, address) of every neighbour entry of this namespace."""
    return [parse_neigh(p) for t, p in dump(RTM_GETNEIGH, struct.pack("=BxxxiHBB", family, 0, 0, 0, 0))
            if t == RTM_NEWNEIGH]


def parse_route(payload: bytes) -> tuple[int, str | None]:
    """rtmsg and its RTA_TABLE/RTA_DST -> (table, 'a.b.c.d/len' or None for a default route)."""
    family, dst_len, _src_len, _tos, table = struct.unpack_from("=BBBBB", payload, 0)
    dst = None
    for atype, value in rtattrs(payload, 12):
        if atype == RTA_TABLE and len(value) == 4:
            table = struct.unpack("=I", value)[0]
        elif atype == RTA_DST and family == socket.AF_INET and len(value) == 4:
            dst = f"{socket.inet_ntoa(value)}/{dst_len}"
    return table, dst


def route_oif(payload: bytes) -> int | None:
    """The RTA_OIF of an rtmsg: the interface of a single-nexthop route (None for multipath or none)."""
    for atype, value in rtattrs(payload, 12):
        if atype == RTA_OIF and len(value) == 4:
            return struct.unpack("=i", value)[0]
    return None


def tables_oifs(tables: tuple[int, ...]) -> dict[int, dict[str, int | None]]:
    """table -> prefix -> its output interface (route_oif), for these tables of this namespace, from one dump
    (the kernel dumps every table; filtered here)."""
    out: dict[int, dict[str, int | None]] = {t: {} for t in tables}
    for t, p in dump(RTM_GETROUTE, struct.pack("=BBBBBBBBI", socket.AF_INET, 0, 0, 0, 0, 0, 0, 0, 0)):
        if t == RTM_NEWROUTE:
            tbl, dst = parse_route(p)
            if tbl in out and dst:
                out[tbl][dst] = route_oif(p)
    return out


def route_oifs(table: int) -> dict[str, int | None]:
    """prefix -> its output interface, for one table."""
    return tables_oifs((table,))[table]


NTF_USE = 0x01
NUD_NONE = 0x00


def neigh_body(ip: str, ifindex: int, state: int = NUD_NONE, flags: int = 0) -> bytes:
    """ndmsg + NDA_DST of an IPv4 neighbour (pure)."""
    return struct.pack("=BxxxiHBB", socket.AF_INET, ifindex, state, flags, 0) + attr(NDA_DST, socket.inet_aton(ip))


def neigh_solicit(ip: str, ifindex: int) -> None:
    """Resolve ``ip`` on the interface now, as a packet to it would (NTF_USE: the kernel's neigh_event_send):
    an entry that is absent or FAILED becomes INCOMPLETE and an ARP request goes out at once; one that is
    valid is left as it is (STALE: the usual delayed probe)."""
    _exchange(RTM_NEWNEIGH, NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE, neigh_body(ip, ifindex, flags=NTF_USE))


def route_prefixes(table: int) -> set[str]:
    """The IPv4 prefixes of one routing table."""
    return set(route_oifs(table))


RTNH_F_LINKDOWN = 0x10
NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY = 4, 20
TCP_ESTABLISHED = 1


def diag_socket() -> socket.socket:
    """A NETLINK_SOCK_DIAG socket of the calling thread's namespace (for tcp_established)."""
    return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)


def tcp_established(port: int, sock: socket.socket) -> int:
    """How many TCP connections of the socket's namespace, IPv4 and IPv6, are established with ``port`` at
    either end (one inet_diag dump per family; the kernel's own count, no process started)."""
    n = 0
    for family in (socket.AF_INET, socket.AF_INET6):
        # inet_diag_req_v2: family, protocol, ext, pad, states; then an all-zero socket id (no filter)
        body = struct.pack("=BBBxI", family, socket.IPPROTO_TCP, 0, 1 << TCP_ESTABLISHED) + b"\0" * 48
        for t, p in _exchange(SOCK_DIAG_BY_FAMILY, NLM_F_DUMP, body, sock):
            if t == SOCK_DIAG_BY_FAMILY and len(p) >= 8:
                sport, dport = struct.unpack_from("!HH", p, 4)  # inet_diag_msg: 4 bytes, then id.sport/dport
                n += port in (sport, dport)
    return n


def usable_routes(table: int = 254, sock: socket.socket | None = None) -> set[str]:
    """The IPv4 unicast prefixes of one table that are not marked linkdown (what ``ip -4 route show``
    lists without 'linkdown'; a /32 as a.b.c.d/32), of this namespace or of the one ``sock`` lives in."""
    out = set()
    for t, p in dump(RTM_GETROUTE, struct.pack("=BBBBBBBBI", socket.AF_INET, 0, 0, 0, 0, 0, 0, 0, 0), sock):
        if t != RTM_NEWROUTE or len(p) < 12:
            continue
        rtype, flags = p[7], struct.unpack_from("=I", p, 8)[0]
        tbl, dst = parse_route(p)
        if tbl == table and dst and rtype == RTN_UNICAST and not flags & RTNH_F_LINKDOWN:
            out.add(dst)
    return out


def route_body(dst: str, table: int, oif: int | None = None, rtype: int = RTN_UNICAST, proto: int = 0,
               scope: int = RT_SCOPE_UNIVERSE) -> bytes:
    """rtmsg + attributes of an IPv4 route (pure, unit-tested against what the kernel reads back)."""
    addr, _, plen = dst.partition("/")
    body = struct.pack("=BBBBBBBBI", socket.AF_INET, int(plen or 32), 0, 0, table if table < 256 else 252,
                       proto, scope, rtype, 0)
    body += attr(RTA_DST, socket.inet_aton(addr)) + attr(RTA_TABLE, struct.pack("=I", table))
    if oif is not None:
        body += attr(RTA_OIF, struct.pack("=i", oif))
    return body


def route_replace(dst: str, table: int, oif: int | None = None, rtype: int = RTN_UNICAST, proto: int = 0,
                  scope: int = RT_SCOPE_UNIVERSE) -> None:
    _exchange(RTM_NEWROUTE, NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE, route_body(dst, table, oif, rtype, proto, scope))


def route_delete(dst: str, table: int) -> None:
    # in a delete, scope NOWHERE and type 0 mean "any", as ip route del sends them
    _exchange(RTM_DELROUTE, NLM_F_ACK, route_body(dst, table, rtype=0, scope=RT_SCOPE_NOWHERE))


def link_set_up(ifindex: int, up: bool) -> None:
    """A link's admin state (ip link set dev X up|down)."""
    _exchange(RTM_NEWLINK, NLM_F_ACK, struct.pack("=BxHiII", socket.AF_UNSPEC, 0, ifindex,
                                                  IFF_UP if up else 0, IFF_UP))

"""Crafted packets with scapy, run inside a node namespace (``python -m hpnlab.node.programs.craft MODE ...``), JSON out.

- ``paths``: which ToR and which agg each 5-tuple takes. Probes leave through a kernel UDP socket with a
  small TTL (so the kernel's own ECMP hash picks the port, as it does for real traffic); scapy sniffs the
  ICMP time-exceeded answers on every port and decodes the quoted UDP header to match the source port.
  TTL 1 is answered by the ToR (identified by the port it came back on), TTL 2 by the agg (its loopback),
  TTL 3 by the far ToR (its loopback). TCP probes (a SYN) follow the same path as a TCP flow of that
  5-tuple; UDP probes that of a UDP flow (the protocol is part of the L4 hash).
- ``arp``: an ARP request out of one port; every answer with its MAC (the ToR's ARP proxy answers with
  the virtual MAC).
- ``lacp``: LACPDUs heard on a port, decoded (actor system, key, port, state bits).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time


def _quiet_scapy():
    import logging

    logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
    from scapy import all as scapy  # noqa: F401  (heavy import, only inside the node)

    return scapy


def _send_probe(proto: str, src: str, sport: int, dst: str, dport: int, ttl: int) -> None:
    """One packet with this 5-tuple and TTL, through the kernel (so its ECMP hash picks the port). TCP:
    a non-blocking connect sends the SYN; closing in SYN-SENT sends nothing more. A TCP source port still
    held (a connection of that 5-tuple just closed, in TIME_WAIT: re-probing a run's own connections) cannot
    be bound: the SYN then goes out of a raw socket. The kernel routes a raw socket's packets without their
    ports, so on a host with a multipath route (the userspace host driver's, one nexthop per port) it would
    pick the port by addresses alone; the port the 5-tuple's route takes (``ip route get`` with its ports)
    is asked first and the raw socket bound to it. Beyond it the bond and the switches hash the packet's
    headers, as they do the connection's."""
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    s = socket.socket(socket.AF_INET, kind)
    try:
        s.setblocking(False)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
        try:
            s.bind((src, sport))
        except OSError:
            if proto != "tcp":
                raise
            _send_raw_syn(src, sport, dst, dport, ttl, route_dev(src, sport, dst, dport))
            return
        if proto == "tcp":
            s.connect_ex((dst, dport))
        else:
            s.sendto(b"hpnlab-path-probe", (dst, dport))
    finally:
        s.close()


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def syn_segment(src: str, sport: int, dst: str, dport: int, seq: int = 0x68706E6C) -> bytes:
    """A TCP SYN header (20 bytes, no options) with its checksum over the IPv4 pseudo-header."""
    import struct

    hdr = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x02, 64240, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(hdr))
    return hdr[:16] + _checksum(pseudo + hdr).to_bytes(2, "big") + hdr[18:]


def route_dev(src: str, sport: int, dst: str, dport: int) -> str | None:
    """The interface the kernel routes this TCP 5-tuple out of (its multipath hash, ports included)."""
    import subprocess

    r = subprocess.run(["ip", "-j", "route", "get", dst, "from", src, "ipproto", "tcp", "sport", str(sport),
                        "dport", str(dport)], capture_output=True, text=True, timeout=10)
    try:
        return json.loads(r.stdout)[0].get("dev") if r.returncode == 0 else None
    except (ValueError, IndexError, AttributeError):
        return None


def _send_raw_syn(src: str, sport: int, dst: str, dport: int, ttl: int, dev: str | None = None) -> None:
    r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
    try:
        r.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
        if dev:
            r.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, dev.encode())
        r.bind((src, 0))
        r.sendto(syn_segment(src, sport, dst, dport), (dst, 0))
    finally:
        r.close()


def paths(src: str, dst: str, gateway: str, sports: list[int], ifaces: list[str], dport: int = 33434,
          wait: float = 1.0, ttls: tuple[int, ...] = (1, 2), proto: str = "udp") -> dict:
    """Per destination and source port, one probe per TTL with the same 5-tuple (so they hash alike).
    The first-hop ToR answers from the gateway address on the port that leads to it; routers further on
    answer from their loopbacks, listed in ``hops`` nearest first (by the answer's remaining TTL).
    ``dst`` may list several destinations, comma-separated (one scapy start for all)."""
    scapy = _quiet_scapy()
    from scapy.layers.inet import ICMP, IP, IPerror, TCPerror, UDPerror

    quoted = TCPerror if proto == "tcp" else UDPerror
    dsts = dst.split(",")
    ready = threading.Event()
    sniffer = scapy.AsyncSniffer(iface=ifaces, filter="icmp", store=True, started_callback=ready.set)
    sniffer.start()
    if not ready.wait(5):
        raise SystemExit("scapy sniffer did not start within 5 s")
    for d in dsts:
        for sp in sports:
            for ttl in ttls:
                _send_probe(proto, src, sp, d, dport, ttl)
                time.sleep(0.001)
    time.sleep(wait)
    pkts = sniffer.stop() or []
    hops: dict[tuple[str, int], dict] = {(d, sp): {} for d in dsts for sp in sports}
    for p in pkts:
        if ICMP not in p or p[ICMP].type != 11 or quoted not in p or IPerror not in p:
            continue
        q = p[quoted]
        key = (p[IPerror].dst, q.sport)
        if key not in hops or q.dport != dport:
            continue
        if p[IP].src == gateway:
            hops[key]["tor"] = {"src": p[IP].src, "iface": p.sniffed_on}
        else:
            hops[key].setdefault("far", []).append((-p[IP].ttl, p[IP].src))
    out = {}
    for (d, sp), h in hops.items():
        far = [a for _t, a in sorted(set(h.pop("far", [])))]
        if far:
            h["agg"] = {"src": far[0]}
            h["hops"] = far
        out.setdefault(d, {})[str(sp)] = h
    first = out[dsts[0]]
    return {"src": src, "dst": dst, "dport": dport, "proto": proto, "paths": first,
            **({"by_dst": out} if len(dsts) > 1 else {})}


def arp(iface: str, src_ip: str, target: str, wait: float = 1.0) -> dict:
    scapy = _quiet_scapy()
    from scapy.layers.l2 import ARP, Ether

    mac = open(f"/sys/class/net/{iface}/address").read().strip()
    ans, _ = scapy.srp(Ether(src=mac, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=mac, psrc=src_ip, pdst=target),
                       iface=iface, timeout=wait, multi=True, verbose=False)
    return {"iface": iface, "target": target, "answers": [{"mac": r[ARP].hwsrc, "ip": r[ARP].psrc} for _s, r in ans]}


def lacp(iface: str, wait: float = 3.0) -> dict:
    scapy = _quiet_scapy()
    from scapy.contrib.lacp import LACP

    pkts = scapy.sniff(iface=iface, filter="ether proto 0x8809", timeout=wait)
    out = []
    for p in pkts:
        if LACP not in p:
            continue
        lp = p[LACP]
        out.append({"actor_system": lp.actor_system, "actor_key": lp.actor_key, "actor_port": lp.actor_port,
                    "actor_state": lp.actor_state, "partner_system": lp.partner_system,
                    "partner_port": lp.partner_port, "partner_state": lp.partner_state})
    return {"iface": iface, "lacpdus": out}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpnlab.node.programs.craft", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    a = sub.add_parser("paths")
    a.add_argument("--src", required=True)
    a.add_argument("--dst", required=True)
    a.add_argument("--gateway", required=True)
    a.add_argument("--sports", required=True, help="comma-separated source ports")
    a.add_argument("--ifaces", required=True, help="comma-separated ports to sniff on")
    a.add_argument("--dport", type=int, default=33434)
    a.add_argument("--ttls", default="1,2", help="comma-separated TTLs (3 reaches the far ToR)")
    a.add_argument("--proto", choices=("udp", "tcp"), default="udp", help="the 5-tuple's protocol")
    b = sub.add_parser("arp")
    b.add_argument("--iface", required=True)
    b.add_argument("--src-ip", required=True)
    b.add_argument("--target", required=True)
    c = sub.add_parser("lacp")
    c.add_argument("--iface", required=True)
    c.add_argument("--wait", type=float, default=3.0)
    x = p.parse_args(argv)
    if x.mode == "paths":
        res = paths(x.src, x.dst, x.gateway, [int(s) for s in x.sports.split(",")], x.ifaces.split(","), x.dport,
                    ttls=tuple(int(t) for t in x.ttls.split(",")), proto=x.proto)
    elif x.mode == "arp":
        res = arp(x.iface, x.src_ip, x.target)
    else:
        res = lacp(x.iface, x.wait)
    json.dump(res, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

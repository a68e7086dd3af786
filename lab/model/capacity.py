"""Link capacity and switch hashing as data: what each node's node.json says, and the ``tc -batch`` lines
and sysctls that make it so. Pure functions (tests read them without root), applied by every runtime.

Capacity: a token bucket (tc tbf) at the root of every link end, so each direction of a link carries at
most its rate and queues up to ``queue_kb`` bytes before dropping; the queue's backlog is what a switch
port's buffer is, and ``tc -s qdisc`` (or the sampler in hpnlab.node.linkstats) reads it. tbf, htb and
pfifo are the queueing disciplines this project's CI kernel has (no fq, fq_codel or netem).

Hashing: Linux picks an ECMP nexthop by hash-threshold on a keyed hash of the flow; the key is
``net.ipv4.fib_multipath_hash_seed``, per network namespace. Every switch with the same seed makes the
same choice at every tier for a flow (the correlation behind polarisation); distinct seeds decorrelate.
Seeds are derived from names, never random, so a lab hashes alike on every machine and every run.
"""

from __future__ import annotations

import zlib

from hpnlab.node import qos
from hpnlab.node.plan import MTU_FRAME, burst_bytes, tbf_args, tc_batch  # noqa: F401 (re-exported: the plan lives with the node)

SHARED_SEED = zlib.crc32(b"hpnlab shared switch seed")  # one ASIC model: every switch hashes alike
# Switches hash with policy 3 (custom fields), not 1. Why: with policy 1 a router takes an skb's existing
# L4 hash as is, and a locally generated TCP packet carries its socket's random txhash across every veth
# and namespace, so each router used the *sender's random number* instead of its own seeded hash of the
# 5-tuple: a TCP connection's path changed from one connection to the next with the same 5-tuple (and on
# every RTO rehash), whatever the seed. Policy 3 always dissects the packet: a real switch's 5-tuple hash.
HASH_FIELDS = {"l3": 0x0003, "l4": 0x0037}  # src IP, dst IP (+ IP protocol, src port, dst port)


def _seed_of(text: str) -> int:
    return zlib.crc32(text.encode()) or 1  # 0 would tell the kernel to pick a random seed


def switch_seed(seed: str | int, node: str) -> int:
    if seed == "shared":
        return SHARED_SEED
    if seed == "per-switch":
        return _seed_of(f"switch {node}")
    return int(seed)


def host_seed(node: str) -> int:
    """A NIC's bond hash is not the switches' ASIC hash: every host gets its own seed."""
    return _seed_of(f"host {node}")


def hash_sysctls(role: str, node: str, policy: str, seed: str | int) -> dict[str, int]:
    if role == "host":  # the sender's NIC spreads flows over its two ports by their 5-tuple (its own
        # packets: the route lookup hashes the flow's keys, never an skb hash, so policy 1 is exact)
        return {"net.ipv4.fib_multipath_hash_policy": 1, "net.ipv4.fib_multipath_hash_seed": host_seed(node)}
    return {"net.ipv4.fib_multipath_hash_policy": 3, "net.ipv4.fib_multipath_hash_fields": HASH_FIELDS[policy],
            "net.ipv4.fib_multipath_hash_seed": switch_seed(seed, node)}


def shape_of(link_class) -> dict | None:
    """A spec LinkClass -> the interface's ``shape`` in node.json (integers, as tc takes them)."""
    if link_class is None:
        return None
    return {"rate_kbit": max(1, round(link_class.rate_mbit * 1000)), "queue_bytes": link_class.queue_kb * 1024}


def parse_rate(text: str) -> int:
    """'100mbit', '500kbit', '1gbit', '20' (Mbit/s) -> kbit/s. ValueError says what is accepted."""
    t = text.strip().lower()
    for unit, mult in (("gbit", 1_000_000), ("mbit", 1000), ("kbit", 1)):
        if t.endswith(unit):
            num = t[: -len(unit)]
            break
    else:
        num, mult = t, 1000
    try:
        v = float(num)
    except ValueError:
        raise ValueError(f"'{text}' is not a rate; give e.g. 100mbit, 500kbit or 1gbit") from None
    kbit = round(v * mult)
    if not 1 <= kbit <= 100_000_000 or v != v:
        raise ValueError(f"'{text}' is out of range; give 1kbit to 100gbit")
    return kbit


def port_argvs(cfg: dict, iface: str, shape: dict, rates_only: bool = False) -> list[list[str]]:
    """The tc commands that give one port of a running lab ``shape`` (node.json ``cfg``): a tbf, or on a switch
    with qos its queues' tree, built anew (the root deleted first: htb has no change operation for its qdisc,
    so a replace over an htb fails), or with ``rates_only`` on a tree in place only its rates (htb's classes,
    or the tbf above prio/ets): the queues and what waits in them stay."""
    if not qos.applies(cfg):
        return [["tc", "qdisc", "replace", "dev", iface, "root", "handle", "1:", *tbf_args(shape)]]
    lines = qos.tc_lines(iface, shape, cfg["qos"], burst_bytes(shape["rate_kbit"]), MTU_FRAME)
    if rates_only:
        lines = [ln for ln in lines if ln.startswith("class ")] if cfg["qos"]["scheduler"] == "htb" else lines[:1]
        return [["tc", *ln.split()] for ln in lines]
    return [["tc", "qdisc", "del", "dev", iface, "root"]] + [["tc", *ln.split()] for ln in lines]

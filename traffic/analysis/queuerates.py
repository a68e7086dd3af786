"""A switch port's priority queues over time (spec qos): bytes per queue read through ``Lab.link_stats``,
the rates between two readings, and a poll until a queue starts or stops carrying traffic. The QoS lab test
and bench/qos.py measure with these.

A reading may sum several ports: a single-ToR host is dual-homed to one ToR, and that ToR forwards to it out
of the port its /32 host route names, the member port its ARP entry was last learnt on, which can change
while a flow runs (``host_ports`` gives them all)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from hpnlab.errors import RuntimeFailure

Reading = tuple[float, dict[int, int]]  # (monotonic time, queue -> bytes sent)


def reading(lab, node: str, port: str | Sequence[str]) -> Reading:
    """Bytes sent per queue on ``port`` (or summed over several ports) of ``node``, now."""
    stats = lab.link_stats(node)
    total: dict[int, int] = {}
    for p in [port] if isinstance(port, str) else port:
        for k, v in stats[p]["queues"].items():
            total[k] = total.get(k, 0) + v["bytes"]
    return time.monotonic(), total


def host_ports(lab, node: str, host: str) -> list[str]:
    """Every port of switch ``node`` that leads to ``host`` (two for a single-ToR host: its bond's members)."""
    return [hp.iface for hp in lab.cfgs[node].host_ports if hp.host == host]


def rates(a: Reading, b: Reading) -> dict[int, float]:
    """Mbit/s per queue between two readings."""
    dt = b[0] - a[0]
    return {k: (b[1][k] - a[1][k]) * 8 / dt / 1e6 for k in sorted(a[1])}


def wait_moving(lab, node: str, port: str | Sequence[str], queue: int, moving: bool, timeout: float = 10.0,
                every: float = 0.5, floor_mbit: float = 0.0) -> None:
    """Poll until the queue carries more than ``floor_mbit`` over ``every`` s (moving), or no more than that
    (not moving). A floor above the switch's own packets (BGP, LACP: a few kbit/s, in its default queue)
    tells a flow from them."""
    deadline = time.monotonic() + timeout
    last = reading(lab, node, port)
    while time.monotonic() < deadline:
        time.sleep(every)
        now = reading(lab, node, port)
        if (rates(last, now)[queue] > floor_mbit) == moving:
            return
        last = now
    raise RuntimeFailure(f"{node}:{port} queue {queue} {'never carried' if moving else 'kept carrying'} "
                         f"{'more than ' if floor_mbit else ''}{f'{floor_mbit:g} Mbit/s' if floor_mbit else 'bytes'} "
                         f"within {timeout:g} s (bytes sent per queue at the end: {last[1]})")

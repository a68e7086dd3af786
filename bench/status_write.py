#!/usr/bin/env python3
"""Benchmark: what one write of an agent's status file costs (every agent writes it every second), the
agents' StatusFile against the plain way it was written before (the whole document through json.dumps,
then Path.write_text and a rename), side by side in one process, alternating rounds.

The document is a host agent's of the paper's segment (8 rails, dual-ToR: 16 LACP ports) from the host
agent's own snapshot, with the last minute's events of a bring-up (~100 lines) and a few late-timer bins.
Root-free; writes in a temporary directory. Prints microseconds of CPU per write (process time, min, median
and max of the rounds) and the ratio; ``--json FILE`` keeps them with the provenance.

    .venv/bin/python bench/status_write.py [--writes 2000] [--rounds 7] [--events 96]
        [--json results/idle-cpu/status-write.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]


def host_agent(now: float):
    """A host agent's state as the segment's hosts have it: 8 NICs of 2 LACP ports, all collecting."""
    from hpnlab.node.agents import lacp

    nics = [{"rail": r, "ip": f"10.{r}.0.2", "ports": [f"r{r}p0", f"r{r}p1"], "mac": f"02:00:00:00:00:{r:02x}"}
            for r in range(8)]
    groups = [[lacp.Port(p, n["mac"], n["mac"], 1, i + 1, sys_prio=65535, fast=True)
               for i, p in enumerate(n["ports"])] for n in nics]
    for g in groups:
        for p in g:
            p.set_enabled(True, now)
    return SimpleNamespace(cfg={"name": "s0h0"}, mech={"lacp": True, "arp_duplication": True}, nics=nics,
                           groups=groups, applied=[tuple(n["ports"]) for n in nics], bfd=None, route_changes=3)


def plain_write(path: Path, data: dict) -> None:
    """The status file as it was written before: the whole document through json.dumps every time."""
    from hpnlab.node.agents import agent

    now = time.time()
    data = {**data, "pid": os.getpid(), "time": now, "timers_late": agent.TIMERS.report(),
            "events": [e for e in tuple(agent.EVENTS) if e[0] > now - agent.EVENTS_S]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writes", type=int, default=2000, help="writes per round (default 2000)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds of each, alternating (default 7)")
    ap.add_argument("--events", type=int, default=96, help="events of the last minute in the file (default 96, "
                    "what a segment host agent's held 20 s after its bring-up)")
    ap.add_argument("--json", type=Path, help="write the figures here, with the provenance")
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    a = ap.parse_args()
    machineload.settle_or_exit(a.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    from hpnlab.node.agents import agent
    from hpnlab.node.agents.host import HostAgent

    now_m, now = time.monotonic(), time.time()
    fake = host_agent(now_m)
    agent.EVENTS.extend((round(now - 40 + i * 0.2, 4), f"r{i % 8}p{i % 2}: mux attached -> collecting_distributing "
                         f"(partner 00:00:5e:00:01:01 port {i})") for i in range(a.events))
    for i in range(3):
        agent.TIMERS.record(now - 10 * i, 0.002)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "status.json"
        sf = agent.StatusFile(str(path))
        ways = {"statusfile": lambda: sf.write(HostAgent.snapshot(fake, now_m)),
                "plain": lambda: plain_write(path, HostAgent.snapshot(fake, now_m))}
        us: dict[str, list[float]] = {k: [] for k in ways}
        for _ in range(a.rounds):
            for name, fn in ways.items():  # alternating, so a drift of the machine falls on both alike
                t0 = time.process_time()
                for _ in range(a.writes):
                    fn()
                us[name].append(1e6 * (time.process_time() - t0) / a.writes)
        size = path.stat().st_size
        sf.write(HostAgent.snapshot(fake, now_m))
        mine = json.loads(path.read_text())
        plain_write(path, HostAgent.snapshot(fake, now_m))
        theirs = json.loads(path.read_text())
    same = {k: v for k, v in mine.items() if k != "time"} == {k: v for k, v in theirs.items() if k != "time"}
    res = {"bytes": size, "events": a.events, "writes_per_round": a.writes, "rounds": a.rounds,
           "same_document": same,
           **{name: {"us_min": round(min(v), 1), "us_median": round(statistics.median(v), 1), "us_max": round(max(v), 1),
              "us_rounds": [round(x, 1) for x in v]} for name, v in us.items()},
           "ratio_median": round(statistics.median(us["statusfile"]) / statistics.median(us["plain"]), 3)}
    print(f"status file of {size} bytes ({a.events} events), CPU per write over {a.rounds} rounds of {a.writes}:")
    for name in ways:
        print(f"  {name:<11} min {res[name]['us_min']:7.1f} us, median {res[name]['us_median']:7.1f} us, "
              f"max {res[name]['us_max']:7.1f} us")
    print(f"  StatusFile / plain: x{res['ratio_median']} (medians); the same document: {same}")
    if a.json:
        sys.path.insert(0, str(ROOT))
        from hpnlab.instrument import provenance

        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({**res, "provenance": provenance.collect()}, indent=1) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

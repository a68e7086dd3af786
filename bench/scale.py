#!/usr/bin/env python3
"""Scale ladder (root): each rung is brought up, verified, watched idle, and taken down; per phase the
wall time and the machine's CPU seconds, then memory, BGP messages, and whether it converged.

    sudo .venv/bin/python bench/scale.py                       # the whole ladder, up to the paper's segment
    sudo .venv/bin/python bench/scale.py --rungs 48,264 --idle 600 --set '{bfd: {enabled: false}}'
    sudo .venv/bin/python bench/scale.py --plot-only            # redraw results/scale/plot.png

Rungs are named by node count and derived from examples/segment-full.yml (1 segment, 8 rails, dual-plane)
by its host count and aggs per plane, except 16 (examples/default.yml). Phases: namespaces, links, node
config, zebra start, agents, bgpd start (from `hpnlab up`'s own steps), BGP converged (every session established and
every agg holding every /32 and subnet), verified (reachability too), idle (BGP sessions dropped while
nothing happens), down. CPU is the machine's busy time (user + system + softirq, not steal) over the
phase, so 2 cores give at most 2 CPU-s per second. Memory after verify: PSS of FRR per router (by
daemon), of each agent, and the kernel's share (growth of used memory not explained by the lab's
processes: namespaces, veths, routes, neighbour entries); peak is the machine's used memory, sampled.

Results: results/scale/scale.json (one record per rung and run) and plot.png.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "results" / "scale"
# node count -> (hosts per segment, aggs per plane); 8 rails, 1 segment, dual-plane: 16 ToRs
RUNGS = {32: (8, 4), 48: (16, 8), 78: (32, 15), 140: (64, 30), 264: (128, 60)}
PHASES = [("creating", "namespaces"), ("creating", "links"), ("configuring nodes", "node config"),
          ("starting zebra", "zebra start"), ("starting bgpd", "bgpd start"), ("starting", "agents")]


def busy_jiffies() -> int:
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = f[:7]
    return user + nice + system + irq + softirq


HZ = os.sysconf("SC_CLK_TCK")


def used_kib() -> int:
    m = {ln.split(":")[0]: int(ln.split()[1]) for ln in open("/proc/meminfo")}
    return m["MemTotal"] - m["MemAvailable"]


def pss_kib(pid: int) -> int:
    try:
        for ln in open(f"/proc/{pid}/smaps_rollup"):
            if ln.startswith("Pss:"):
                return int(ln.split()[1])
    except OSError:
        pass
    return 0


def kind_of(comm: str, cmdline: list[str]) -> str | None:
    """Which kind of lab process this is, for the CPU split: an FRR daemon by name, an agent by its module."""
    if comm in ("zebra", "bgpd", "bfdd"):
        return comm
    mod = next((a for a in cmdline if a.startswith("hpnlab.node.")), None)
    if mod in ("hpnlab.node.agents.tor", "hpnlab.node.agents.host", "hpnlab.node.agents.bondhost", "hpnlab.node.agents.fare",
               "hpnlab.node.agents.launcher"):
        return "agents"
    return None


def cpu_by_kind() -> dict[str, float]:
    """CPU-s so far of the lab's live processes by kind (FRR daemons, agents: they are not our children),
    of this process (the controller: render, verify's threads) and of its reaped children (ip, vtysh,
    probers, launchers: everything the controller spawned and waited for)."""
    out = {"zebra": 0.0, "bgpd": 0.0, "bfdd": 0.0, "agents": 0.0}
    for e in os.scandir("/proc"):
        if not e.name.isdigit():
            continue
        try:
            raw = open(f"/proc/{e.name}/stat").read()
            comm = raw[raw.index("(") + 1:raw.rindex(")")]
            f = raw[raw.rindex(")") + 2:].split()
            # an agent forked by the launcher is named after its node (prctl), so read every command line
            cmd = [] if comm in ("zebra", "bgpd", "bfdd") else open(f"/proc/{e.name}/cmdline").read().split("\0")
        except (OSError, ValueError):
            continue
        k = kind_of(comm, cmd)
        if k:
            out[k] += (int(f[11]) + int(f[12])) / HZ
    t = os.times()
    out["controller"] = t.user + t.system
    out["spawned"] = t.children_user + t.children_system
    return out


class Clock:
    """Wall and CPU at each phase boundary (the machine's, and by process kind), and the peak of used
    memory (sampled every 0.5 s)."""

    def __init__(self):
        self.marks: list[tuple[str, float, int]] = []
        self.peak = used_kib()
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self):
        while not self._stop.wait(0.5):
            self.peak = max(self.peak, used_kib())

    def mark(self, phase: str) -> None:
        self.marks.append((phase, time.monotonic(), busy_jiffies(), cpu_by_kind()))

    def phases(self) -> dict[str, dict]:
        """Per phase: wall, the machine's busy CPU-s, and CPU-s by process kind ("other": the machine's
        rest: the kernel's softirq and workqueues, processes that exited unreaped, anything else)."""
        out = {}
        for (name, t0, c0, k0), (_n, t1, c1, k1) in zip(self.marks, self.marks[1:]):
            if name != "-":  # "-": after the last phase
                kinds = {k: round(k1[k] - k0.get(k, 0), 2) for k in k1}
                kinds["other"] = round(max(0.0, (c1 - c0) / HZ - sum(kinds.values())), 2)
                out[name] = {"wall_s": round(t1 - t0, 2), "cpu_s": round((c1 - c0) / HZ, 1), "by_kind": kinds}
        return out

    def stop(self):
        self._stop.set()


def spec_for(nodes: int, overrides: dict):
    from hpnlab.model.spec import load_spec_data, merge, parse_spec

    if nodes == 16:
        data, where = load_spec_data("default")
        data = merge(data, {"name": "scale16"})
    else:
        hosts, aggs = RUNGS[nodes]
        data, where = load_spec_data("segment-full")
        data = merge(data, {"name": f"scale{nodes}", "hosts_per_segment": hosts, "aggs_per_plane": aggs})
    return parse_spec(merge(data, overrides), where)


def bgp_counters(rt, routers: list[str]) -> dict:
    """Summed over every router: UPDATEs received, sessions established and dropped so far."""
    from concurrent.futures import ThreadPoolExecutor

    def one(n):
        d = rt.vtysh_json(n, "show bgp neighbors json", timeout=60) or {}
        s = (rt.vtysh_json(n, "show bgp ipv4 unicast summary json", timeout=60) or {}).get("peers", {})
        return [(p.get("messageStats", {}).get("updatesRecv", 0), p.get("messageStats", {}).get("updatesSent", 0),
                 p.get("connectionsEstablished", 0), p.get("connectionsDropped", 0),
                 (s.get(peer) or {}).get("pfxRcd", 0), (s.get(peer) or {}).get("pfxSnt", 0))
                for peer, p in d.items() if isinstance(p, dict)]

    with ThreadPoolExecutor(max_workers=4) as ex:
        rows = [r for rows in ex.map(one, routers) for r in rows]
    n = max(1, len(rows))
    # The least a convergence needs: each router learns each prefix once per session that carries it in
    # the end (the prefixes every session holds now). FRR packs prefixes with the same attributes into one
    # UPDATE, so a start that announces a router's prefixes together needs fewer messages than that.
    return {"updates_received": sum(r[0] for r in rows), "updates_sent": sum(r[1] for r in rows),
            "established": sum(r[2] for r in rows), "dropped": sum(r[3] for r in rows), "peers": len(rows),
            "prefixes_held": sum(r[4] for r in rows), "prefixes_sent": sum(r[5] for r in rows),
            "updates_received_per_session": round(sum(r[0] for r in rows) / n, 1),
            "updates_per_prefix_held": round(sum(r[0] for r in rows) / max(1, sum(r[4] for r in rows)), 3)}


def memory(rt, cfgs: dict, base_used: int) -> dict:
    from hpnlab.generate import frr

    routers: dict[str, dict[str, int]] = {}
    for pid, daemon, ns in rt.frr_daemons():
        routers.setdefault(ns, {})[daemon] = pss_kib(pid)
    agents = {"host": [], "tor": []}
    for n, c in cfgs.items():
        pid = rt.agent_pid(n)
        if pid and c.role in agents:
            agents[c.role].append(pss_kib(pid))
    per_router = [sum(d.values()) for d in routers.values()]
    by_daemon = {d: max((r.get(d, 0) for r in routers.values()), default=0) / 1024 for d in frr.DAEMONS}
    mean_daemon = {d: sum(v) / len(v) / 1024 for d in frr.DAEMONS
                   if (v := [r[d] for r in routers.values() if d in r])}
    procs = sum(per_router) + sum(sum(v) for v in agents.values())
    used = used_kib()
    mib = lambda kib: round(kib / 1024, 1)  # noqa: E731
    return {"frr_total_mib": mib(sum(per_router)), "frr_per_router_max_mib": mib(max(per_router, default=0)),
            "frr_per_router_mean_mib": mib(sum(per_router) / max(1, len(per_router))),
            "frr_daemon_max_mib": {d: round(v, 1) for d, v in by_daemon.items() if v},
            "frr_daemon_mean_mib": {d: round(v, 1) for d, v in mean_daemon.items()},
            "agents_total_mib": mib(sum(sum(v) for v in agents.values())),
            **{f"{role}_agent_max_mib": mib(max(v)) for role, v in agents.items() if v},
            **{f"{role}_agent_mean_mib": mib(sum(v) / len(v)) for role, v in agents.items() if v},
            "kernel_mib": mib(max(0, used - base_used - procs)), "lab_used_mib": mib(used - base_used)}


def timers(spec: dict) -> str:
    """The timers a rung ran with, from its spec as recorded (defaults where the spec says nothing)."""
    from hpnlab.model.spec import parse_spec

    s = parse_spec({k: v for k, v in spec.items() if k != "name"} | {"name": "t"}, "record")
    bfd = f"BFD {s.bfd.interval_ms} ms x {s.bfd.multiplier}" if s.bfd.enabled else "BFD off"
    return f"LACP {'fast' if s.lacp.fast_rate else 'slow'}, {bfd}, BGP {s.bgp.keepalive}/{s.bgp.hold}"


def series_name(r: dict) -> str:
    return r.get("label") or r.get("timers") or timers(r["spec"])


def agents_late(rt, cfgs) -> dict:
    """How late the agents' timers fired during the bring-up (each agent's worst since it started, from its
    status file): the emulator's own lateness while the lab converged."""
    import statistics

    worst, when = {}, []
    for n in cfgs:
        st = rt.read_status(n)
        if st and "timers_late" in st:
            worst[n] = st["timers_late"].get("worst_ms", 0.0)
            when += [(t, ms) for t, ms in st["timers_late"].get("bins", []) if ms > 1000]
    if not worst:
        return {}
    v = sorted(worst.values())
    top = max(worst, key=worst.get)
    started = rt.state.data.started or 0
    # when (seconds after the deploy began) the agents' timers ran more than 1 s late: first and last bin
    late_s = sorted(round(t - started, 1) for t, _ms in when)
    return {"agents": len(v), "worst_ms": v[-1], "worst_node": top, "median_ms": statistics.median(v),
            "over_1s": sum(x > 1000 for x in v), "late_over_1s_from_s": late_s[:1], "late_over_1s_to_s": late_s[-1:]}


REVERIFY_S = 20.0


def reverify_loop(rt, cfgs, seconds: float) -> list[dict]:
    """verify (every stage, not stopping at the first failure) every REVERIFY_S while the lab idles: does a
    lab that came up verified stay so, and which checks fail when it does not (with the load average)."""
    from hpnlab.lifecycle import verify

    out = []
    end = time.monotonic() + seconds
    while time.monotonic() + REVERIFY_S <= end:
        time.sleep(REVERIFY_S)
        t0 = time.monotonic()
        checks = verify.verify(rt, cfgs, stop_at_failure=False)
        bad = [c for c in checks if not c["ok"]]
        out.append({"at_s": round(seconds - (end - t0), 1), "verify_s": round(time.monotonic() - t0, 2),
                    "load1": float(open("/proc/loadavg").read().split()[0]), "failing": len(bad),
                    "first": [f"{c['name']}: {c['detail'][:160]}" for c in bad[:4]]})
        print(f"  reverify: {out[-1]}", flush=True)
    return out


def run_rung(nodes: int, overrides: dict, timeout: float, idle: float, reverify: bool = False) -> dict:
    from hpnlab.lifecycle import orchestrate, verify
    from hpnlab.instrument import provenance
    from hpnlab.lifecycle.orchestrate import bring_up, tear_down
    from hpnlab.model.topology import build, summary

    spec = spec_for(nodes, overrides)
    size = summary(build(spec))
    base_used = used_kib()
    clock = Clock()
    seen = {"converged": None}
    t0 = time.monotonic()

    def progress(msg: str) -> None:
        print(f"  [{time.monotonic() - t0:6.1f}s] {msg}", flush=True)
        for prefix, phase in PHASES:
            if msg.startswith(prefix) and phase not in [m[0] for m in clock.marks] and \
                    (phase != "links" or "veth" in msg) and (phase != "namespaces" or "namespaces" in msg):
                clock.mark(phase)
                return
        if msg.startswith("waiting for LACP"):
            clock.mark("BGP converged")
        elif msg.startswith("waiting:") and seen["converged"] is None:
            failing = msg.split("; ", 1)[1].split(":")[0] if "; " in msg else ""
            if failing.startswith("reach"):
                seen["converged"] = time.monotonic()

    record = {"nodes": nodes, "spec": spec.model_dump(mode="json", exclude_defaults=True), "size": size,
              "overrides": overrides, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "provenance": provenance.collect()}  # which code, kernel and machine measured it
    record["timers"] = timers(record["spec"])
    clock.mark("render")  # topology, files, neighbour table limits
    try:
        rt, cfgs, checks = bring_up(spec, timeout=timeout, progress=progress, keep=True)
        record["verified"] = verify.complete(checks)
        if not record["verified"]:
            bad = [c for c in checks if not c["ok"]]
            record["failing"] = {"count": len(bad), "first": bad[0]["name"] + ": " + bad[0]["detail"][:200]}
    except KeyboardInterrupt:
        clock.stop()
        raise
    # "BGP converged": the first verify round whose only failing stage was reachability, else verified
    marks = clock.marks
    conv = seen["converged"]
    if conv is not None:
        marks.append(("verified", conv, busy_jiffies()))  # split the wait at that moment (CPU: from here on)
        marks.sort(key=lambda m: m[1])
    clock.mark("idle" if idle else "-")
    if record.get("verified") is not None:
        routers = [n for n, c in cfgs.items() if c.role != "host"]
        record["memory"] = memory(rt, cfgs, base_used)
        record["agents_late"] = agents_late(rt, cfgs)
        before = bgp_counters(rt, routers)
        if idle and record["verified"]:
            print(f"  idle for {idle:g} s, then counting BGP session drops"
                  + (f"; verify every {REVERIFY_S:g} s meanwhile" if reverify else ""), flush=True)
            if reverify:
                record["reverify"] = reverify_loop(rt, cfgs, idle)
            else:
                time.sleep(idle)
            after = bgp_counters(rt, routers)
            record["idle"] = {"seconds": idle, "sessions_dropped": after["dropped"] - before["dropped"],
                              "updates_received": after["updates_received"] - before["updates_received"],
                              "still_verified": verify.complete(verify.verify(rt, cfgs))}
        record["bgp"] = before
    clock.mark("down")
    tear_down(spec.name, progress)
    clock.mark("-")
    record["leftovers"] = orchestrate.leftovers(spec.name)
    record["phases"] = clock.phases()
    if conv is None and "BGP converged" in record["phases"] and record.get("verified"):
        record["phases"]["BGP converged"]["note"] = "converged and verified in the same verify round"
    record["peak_used_mib"] = round((clock.peak - base_used) / 1024, 1)
    clock.stop()
    return record


def plot(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    latest = {(series_name(r), r["nodes"]): r for r in records}  # the last run of each rung and timers
    records = list(latest.values())
    labels = sorted({series_name(r) for r in records}, key=lambda lab: min(r["time"] for r in records
                                                                           if series_name(r) == lab))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5 + 0.22 * len(labels)))
    top_s = top_gib = 0.0
    for i, lab in enumerate(labels):  # one colour per configuration, in the order they were first run
        color = f"C{i % 10}"
        rs = sorted([r for r in records if series_name(r) == lab], key=lambda r: r["nodes"])
        xs = [r["nodes"] for r in rs]
        upto = [sum(p["wall_s"] for k, p in r["phases"].items() if k not in ("idle", "down")) for r in rs]
        a1.plot(xs, upto, "o-", color=color, label=lab)
        for x, r, y in zip(xs, rs, upto):
            if not r.get("verified"):
                a1.annotate("not verified", (x, y), fontsize=8, color="red")
        a1.plot(xs, [r["phases"].get("down", {}).get("wall_s", 0) for r in rs], "s:", color=color, alpha=0.7)
        peak = [r["peak_used_mib"] / 1024 for r in rs]
        a2.plot(xs, peak, "o-", color=color, label=lab)
        a2.plot(xs, [r.get("memory", {}).get("frr_total_mib", 0) / 1024 for r in rs], "^--", color=color, alpha=0.7)
        a2.plot(xs, [r.get("memory", {}).get("agents_total_mib", 0) / 1024 for r in rs], "v:", color=color, alpha=0.7)
        top_s, top_gib = max([top_s, *upto]), max([top_gib, *peak])
    # the targets as lines where they fit the data's scale, else named in the title
    a1.set(xlabel="nodes", ylabel="seconds", ylim=(0, max(top_s * 1.15, 1)),
           title="up -> verified (o, solid) and down (s, dotted); target: segment <= 300 s")
    if top_s * 1.15 >= 300:
        a1.axhline(300, color="grey", lw=0.8, ls=":")
    a2.set(xlabel="nodes", ylabel="GiB", ylim=(0, max(top_gib * 1.15, 0.5)),
           title="peak used (o), FRR PSS (^), agents PSS (v); target <= 12 GiB")
    if top_gib * 1.15 >= 12:
        a2.axhline(12, color="grey", lw=0.8, ls=":")
    for a in (a1, a2):
        a.grid(alpha=0.3)
    handles, names = a1.get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.045 * len(labels) / 2 + 0.04, 1, 1))
    fig.savefig(path, dpi=110)


def table(records: list[dict]) -> str:
    """The records as a Markdown table (one row per run, oldest first; the plot shows the last run of each
    rung and timers). "CPU-s to verified" is the machine's, with the part no lab process took ("other":
    the kernel's work, and whatever else ran on the machine) in brackets: a run on a machine busy with other
    work shows it there."""
    rows = ["| run | nodes | timers | up -> verified | CPU-s to verified (other) | BGP converge | idle: CPU-s / s, drops | "
            "FRR PSS per router | agents PSS (host / ToR) | peak used | down |", "|" + "---|" * 11]
    for r in records:
        ph = r["phases"]
        up = sum(p["wall_s"] for k, p in ph.items() if k not in ("idle", "down"))
        upto = [p for k, p in ph.items() if k not in ("idle", "down")]
        cpu = sum(p["cpu_s"] for p in upto)
        # runs before the split by kind have no "other"
        other = f"{sum(p['by_kind']['other'] for p in upto):.1f}" if all("by_kind" in p for p in upto) else "-"
        idle = ph.get("idle", {})
        drops = r.get("idle", {}).get("sessions_dropped", "-")
        m = r.get("memory", {})
        rows.append(f"| {r['time']} | {r['nodes']} | {series_name(r)} | {up:.1f} s{'' if r.get('verified') else ' (NOT verified)'} | "
                    f"{cpu:.1f} ({other}) | "
                    f"{ph.get('BGP converged', {}).get('wall_s', '-')} s | "
                    f"{idle.get('cpu_s', '-')} / {idle.get('wall_s', '-')}, {drops} | "
                    f"{m.get('frr_per_router_mean_mib', '-')} MiB | "
                    f"{m.get('host_agent_mean_mib', '-')} / {m.get('tor_agent_mean_mib', '-')} MiB | "
                    f"{r['peak_used_mib'] / 1024:.2f} GiB | {ph.get('down', {}).get('wall_s', '-')} s |")
    return "\n".join(rows)


def main() -> int:
    import yaml

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rungs", default="16,32,48,78,140,264",
                    help=f"node counts, comma-separated (16 and {', '.join(map(str, RUNGS))})")
    ap.add_argument("--set", default="{}", help="YAML mapping merged into every rung's spec, e.g. '{bfd: {enabled: false}}'")
    ap.add_argument("--label", default="", help="names this configuration in the JSON and on the plot "
                                                "(default: its timers, e.g. 'LACP slow, BFD off, BGP 3/9')")
    ap.add_argument("--timeout", type=float, default=600, help="seconds to wait for a rung to verify (default 600)")
    ap.add_argument("--idle", type=float, default=0, help="seconds to watch a verified lab for BGP drops")
    ap.add_argument("--reverify", action="store_true", help=f"while idle, verify every {REVERIFY_S:g} s and record "
                                                            "what fails")
    ap.add_argument("--out", default=str(OUT), help="directory for scale.json and plot.png")
    ap.add_argument("--plot-only", action="store_true")
    ap.add_argument("--table", action="store_true", help="print the recorded runs as a Markdown table and exit")
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    a = ap.parse_args()
    if not a.table and not a.plot_only:  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
        machineload.settle_or_exit(a.busy_ok)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    db = out / "scale.json"
    records = json.loads(db.read_text()) if db.exists() else []
    if a.table:
        print(table(records))
        return 0
    if not a.plot_only:
        if os.geteuid() != 0:
            print("bench/scale.py: needs root (it runs labs)", file=sys.stderr)
            return 2
        try:
            overrides = yaml.safe_load(a.set) or {}
            rungs = [int(x) for x in a.rungs.split(",")]
        except (yaml.YAMLError, ValueError) as e:
            print(f"bench/scale.py: --set/--rungs: {e}", file=sys.stderr)
            return 2
        for n in rungs:
            if n != 16 and n not in RUNGS:
                print(f"bench/scale.py: --rungs: no rung of {n} nodes (have 16, {', '.join(map(str, RUNGS))})",
                      file=sys.stderr)
                return 2
        for n in rungs:
            print(f"rung {n} nodes {a.label}", flush=True)
            rec = run_rung(n, overrides, a.timeout, a.idle, a.reverify)
            rec["label"] = a.label
            records.append(rec)
            db.write_text(json.dumps(records, indent=1) + "\n")
            ph = rec["phases"]
            print(f"  -> verified {rec.get('verified')}; " + ", ".join(f"{k} {v['wall_s']} s/{v['cpu_s']} CPU-s"
                                                                       for k, v in ph.items()), flush=True)
            print(f"     memory {json.dumps(rec.get('memory'))}; peak {rec['peak_used_mib']} MiB; "
                  f"bgp {rec.get('bgp')}; idle {rec.get('idle')}", flush=True)
    if records:
        plot(records, out / "plot.png")
        print(f"wrote {db} and {out / 'plot.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Where an idle lab's CPU goes: per process kind, and per mechanism by relaxing one mechanism's timers at a
time (root).

    sudo .venv/bin/python bench/idle_cpu.py                        # the default lab: production, each ablation
    sudo .venv/bin/python bench/idle_cpu.py --lab segment --cases production,relaxed
    sudo .venv/bin/python bench/idle_cpu.py --cases production --before HEAD~1   # agents before / after a change
    sudo .venv/bin/python bench/idle_cpu.py --summary              # rewrite summary.txt from results.json

Each case brings a lab up (``hpnlab.Lab.up``), lets it settle, then reads at the start and the end of a
window the CPU time (user + system, and that of waited-for children: /proc/PID/stat) of every process
inside the lab's namespaces, grouped by kind: the agents (split by the node's role), zebra, bgpd, bfdd,
staticd, watchfrr, anything else. Each figure is % of one core over the window. Beside them: the whole
machine's busy CPU (/proc/stat; machine - lab is the kernel's own work on the lab's packets plus anything
else running), CPU pressure (/proc/pressure/cpu "some": the share of the window in which a runnable task
waited for a CPU), and how late the agents' own timers fired in the window (their status files).

The cases: the lab's production timers (LACP fast, BFD 100 ms x 3, BGP 1/3), then each with one mechanism
relaxed as the paper's segment is (lacp-slow, bfd-off, bgp-3-9), then all three (relaxed). Each case is its
own up / measure / down, in turn, in one invocation: the difference to the production row is what that
mechanism costs idle. ``--before REV`` runs every case twice in turn, first with the agents (the whole
hpnlab package the agents' launcher imports) of that commit, then with the work tree's, so a change to the
agents is measured before and after in one invocation.

Results merge into results/idle-cpu/results.json (one key per lab, case and agents' code), so the default
lab and the segment can be measured in separate invocations; summary.txt is rewritten from the whole file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "idle-cpu"
FRR_KINDS = ("zebra", "bgpd", "bfdd", "staticd", "watchfrr")
LABS = {"default": ("default", "icpu"), "segment": (str(ROOT / "examples" / "segment-full.yml"), "icpseg"),
        # the segment's hosts as they are (8 rails, dual-ToR: 16 LACP ports per host agent), 16 of its 128, and
        # 2 aggs per plane: a host agent's own cost, measured in seconds on a machine the segment saturates
        "rails8": ({"segments": 1, "hosts_per_segment": 16, "rails": 8, "access": "dual-tor", "tier2": "dual-plane",
                    "aggs_per_plane": 2}, "icpr8")}
CASES = {"production": {}, "lacp-slow": {"lacp": {"fast_rate": False}}, "bfd-off": {"bfd": {"enabled": False}},
         "bgp-3-9": {"bgp": {"keepalive": 3, "hold": 9}}}
CASES["relaxed"] = {k: v for d in list(CASES.values()) for k, v in d.items()}
# LACP fast with the other two relaxed: at the segment, where production never came up healthy (issue 41),
# relaxed minus this is what LACP fast costs
CASES["lacp-fast-only"] = {k: v for k, v in CASES["relaxed"].items() if k != "lacp"}
# production with a slower BFD: bfdd's cost per session end at each interval, which is what decides whether
# the segment's 1,920 ends fit 2 cores (bench/segment_timers.py)
CASES["bfd-300ms"] = {"bfd": {"interval_ms": 300}}
CASES["bfd-1s"] = {"bfd": {"interval_ms": 1000}}
# which mechanism each ablation switches off or down: its cost is production minus that case
MECHANISMS = {"lacp-slow": "LACP fast (1 s PDUs) vs slow (30 s)", "bfd-off": "BFD 100 ms x 3 vs off",
              "bgp-3-9": "BGP keepalive/hold 1/3 vs 3/9", "relaxed": "all three",
              "lacp-fast-only": "LACP fast vs slow with BFD off and BGP 3/9",
              "bfd-300ms": "BFD 100 ms x 3 vs 300 ms x 3", "bfd-1s": "BFD 100 ms x 3 vs 1 s x 3"}


# --- pure: grouping and arithmetic (tests/test_idle_cpu.py) --------------------------------------------------
def parse_stat_split(raw: str) -> tuple[str, int, int]:
    """(comm, user ticks, system ticks) from /proc/PID/stat, each with its waited-for children's."""
    comm = raw[raw.index("(") + 1:raw.rindex(")")]
    f = raw[raw.rindex(")") + 2:].split()  # f[0] is field 3 (state): utime is field 14, f[11]
    return comm, int(f[11]) + int(f[13]), int(f[12]) + int(f[14])


def parse_stat(raw: str) -> tuple[str, int]:
    """(comm, clock ticks of user + system + waited-for children's user + system) from /proc/PID/stat."""
    comm, user, system = parse_stat_split(raw)
    return comm, user + system


def kind_of(comm: str, cmdline: str, role: str) -> str:
    """A lab process's kind: an FRR daemon by its name, an agent by its module (every agent runs forked from
    the launcher or as ``python -m hpnlab.node.<role>``; the launcher names each after its node), by role."""
    if comm in FRR_KINDS:
        return comm
    if "hpnlab.node." in cmdline:
        return f"agent_{role}"
    return "other"


def by_kind(procs: dict[int, tuple[str, int]]) -> dict[str, int]:
    """pid -> (kind, ticks) into kind -> ticks."""
    out: dict[str, int] = {}
    for kind, ticks in procs.values():
        out[kind] = out.get(kind, 0) + ticks
    return out


def pct_by_kind(before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]], wall_s: float,
                hz: int) -> dict[str, float]:
    """% of one core per kind over a window: each process's ticks at the end minus at the start (a process
    that started inside the window counts from 0; one that ended inside it is lost, but its CPU is in its
    parent's children's time if the parent waited for it)."""
    delta: dict[int, tuple[str, int]] = {}
    for pid, (kind, t1) in after.items():
        t0 = before[pid][1] if pid in before and before[pid][0] == kind else 0
        delta[pid] = (kind, max(0, t1 - t0))
    return {k: round(100.0 * v / hz / wall_s, 2) for k, v in sorted(by_kind(delta).items())}


def machine_busy_ticks(line: str) -> int:
    """Busy ticks from /proc/stat's first line (every state but idle and iowait; guest is within user)."""
    f = [int(x) for x in line.split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (f + [0] * 8)[:8]
    return user + nice + system + irq + softirq + steal


def softirq_ticks(line: str) -> int:
    """irq + softirq ticks from /proc/stat's first line: the kernel's packet work (a veth pair's packets
    are handled in softirq), whoever's they are."""
    f = [int(x) for x in line.split()[1:]]
    return f[5] + f[6]


def psi_some_total_us(text: str) -> int:
    """The 'some' line's total (µs) from /proc/pressure/cpu."""
    for line in text.splitlines():
        if line.startswith("some "):
            return int(dict(kv.split("=") for kv in line.split()[1:])["total"])
    raise ValueError("no 'some' line in /proc/pressure/cpu")


def late_in_window(timers: dict[str, dict], t0: float, t1: float) -> dict:
    """The agents' late-timer bins that fall inside [t0, t1] epoch s: the worst, and how many bins."""
    worst, n = 0.0, 0
    for rep in timers.values():
        for start, ms in rep.get("bins", []):
            if t0 <= start < t1:
                worst, n = max(worst, ms), n + 1
    return {"worst_ms": round(worst, 2), "late_bins": n}


def mechanism_costs(cases: dict[str, dict]) -> dict[str, float]:
    """Per ablation: the lab's % of a core in production minus with that mechanism relaxed; and LACP fast
    over all-relaxed (lacp-fast-only minus relaxed), where production is not measured."""
    prod, out = cases.get("production"), {}
    if prod:
        out = {name: round(prod["pct_lab"] - c["pct_lab"], 2) for name, c in cases.items()
               if name in MECHANISMS and name != "lacp-fast-only"}
    if "lacp-fast-only" in cases and "relaxed" in cases:
        out["lacp-fast-only"] = round(cases["lacp-fast-only"]["pct_lab"] - cases["relaxed"]["pct_lab"], 2)
    return out


# --- measuring (root) ---------------------------------------------------------------------------------------
def read_procs(members: dict[int, str], roles: dict[str, str]) -> tuple[dict, dict]:
    """pid -> (kind, ticks), all and system time only (the kernel's work a process asked for: its sends)."""
    out, sys_out = {}, {}
    for pid, ns in members.items():
        try:
            comm, user, system = parse_stat_split(Path(f"/proc/{pid}/stat").read_text())
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue  # ended meanwhile
        kind = kind_of(comm, cmd, roles.get(ns, "?"))
        out[pid], sys_out[pid] = (kind, user + system), (kind, system)
    return out, sys_out


def snapshot(lab) -> tuple[dict, tuple[int, int], int, float, float]:
    from hpnlab.runtime.base import netns_members

    roles = {lab.runtime.netns(n): lab.role(n) for n in lab.nodes}
    procs = read_procs(netns_members(list(roles)), roles)
    line = Path("/proc/stat").read_text().splitlines()[0]
    psi = psi_some_total_us(Path("/proc/pressure/cpu").read_text())
    return procs, (machine_busy_ticks(line), softirq_ticks(line)), psi, time.monotonic(), time.time()


def measure(lab_key: str, case: str, window: float, settle: float, timeout: float) -> dict:
    from hpnlab import Lab

    spec, name = LABS[lab_key]
    hz = os.sysconf("SC_CLK_TCK")
    t0 = time.monotonic()
    lab = Lab.up(spec, name=name, overrides=CASES[case] or None, timeout=timeout)
    up_s = time.monotonic() - t0
    try:
        time.sleep(settle)
        p0, b0, s0, m0, e0 = snapshot(lab)
        time.sleep(window)
        p1, b1, s1, m1, e1 = snapshot(lab)
        late = late_in_window(lab.timers_late(), e0, e1)
        nodes = len(lab.nodes)
    finally:
        lab.down()
    wall = m1 - m0
    kinds = pct_by_kind(p0[0], p1[0], wall, hz)
    row = {"lab": lab_key, "case": case, "nodes": nodes, "processes": len(p1[0]), "up_s": round(up_s, 1),
           "window_s": round(wall, 1), "pct_core": kinds, "pct_core_system": pct_by_kind(p0[1], p1[1], wall, hz),
           "pct_lab": round(sum(kinds.values()), 2),
           "pct_agents": round(sum(v for k, v in kinds.items() if k.startswith("agent")), 2),
           "pct_machine": round(100.0 * (b1[0] - b0[0]) / hz / wall, 2),
           "pct_softirq": round(100.0 * (b1[1] - b0[1]) / hz / wall, 2),
           "psi_some_pct": round(100.0 * (s1 - s0) / 1e6 / wall, 2), "agent_timers_late": late}
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


class AgentsFrom:
    """The hpnlab package of commit REV, first on PYTHONPATH for the processes the lab starts (the agents'
    launcher, a ``python -m hpnlab.node.agents.launcher``): the editable install's finder comes after PYTHONPATH."""

    def __init__(self, rev: str | None):
        self.rev, self.dir, self.old = rev, None, None

    def __enter__(self):
        if self.rev:
            self.dir = Path(tempfile.mkdtemp(prefix="idle-cpu-agents-"))
            tar = subprocess.run(["git", "-C", str(ROOT), "archive", self.rev, "lab"], check=True,
                                 capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(self.dir)], input=tar, check=True)
            (self.dir / "lab").rename(self.dir / "hpnlab")
            self.old = os.environ.get("PYTHONPATH")
            os.environ["PYTHONPATH"] = str(self.dir)
        return self

    def __exit__(self, *exc):
        if self.rev:
            if self.old is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = self.old
            shutil.rmtree(self.dir, ignore_errors=True)


def code_label(rev: str | None) -> str:
    ref = rev or "HEAD"
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], capture_output=True,
                         text=True).stdout.strip()
    dirty = "" if rev or not subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "lab/node"],
                                            capture_output=True, text=True).stdout.strip() else "+changes"
    return f"{sha}{dirty}"


# --- the file -------------------------------------------------------------------------------------------------
LEGEND = {
    "case": "the lab's timers: production, or one mechanism relaxed as the paper's segment relaxes it",
    "nodes": "the lab's nodes",
    "lab": "CPU time of every process in the lab's namespaces, % of one core over the window",
    "machine": "the whole machine's busy CPU, % of one core (other users' work included)",
    "softirq": "the machine's irq + softirq (the packets), % of one core",
    "psi": "CPU pressure 'some': % of the window a runnable task waited for a CPU",
    "late": "the agents' worst timer lateness in the window (ms)",
    "DAEMON": "a column per process kind (agent_host, agent_tor, bfdd, bgpd, zebra): % of one core",
}


def summary(doc: dict) -> str:
    """A section per lab and agents' code: the lab's and machine's figures, then the processes' (a second
    table, so each fits 100 columns), the costs of the mechanisms; the legend of every column last."""
    from hpnlab.traffic.output import report

    lines = ["Idle CPU of a lab, % of one core over the window (bench/idle_cpu.py)", ""]
    for lab_key, codes in doc.get("labs", {}).items():
        for code, c in codes.items():
            lines.append(f"== {lab_key} lab, {code}: the agents of {c['label']}")
            kinds = sorted({k for row in c["cases"].values() for k in row["pct_core"]})
            lines.append(f"{'case':<14} {'nodes':>5} {'lab':>7} {'machine':>7} {'softirq':>7} {'psi':>6} {'late':>6}")
            for case, row in c["cases"].items():
                lines.append(f"{case:<14} {row['nodes']:>5} {row['pct_lab']:>7.2f} {row['pct_machine']:>7.2f} "
                             f"{row.get('pct_softirq', float('nan')):>7.2f} {row['psi_some_pct']:>6.2f} "
                             f"{row['agent_timers_late']['worst_ms']:>6.1f}")
            lines.append(f"{'case':<14}" + "".join(f" {k:>10}" for k in kinds))
            for case, row in c["cases"].items():
                lines.append(f"{case:<14}" + "".join(f" {row['pct_core'].get(k, 0.0):>10.2f}" for k in kinds))
            for case, row in c["cases"].items():
                if row.get("pct_core_system"):
                    lines.append(f"  {case}, of which system time: "
                                 + ", ".join(f"{k} {v:.2f}" for k, v in row["pct_core_system"].items() if v))
            for mech, cost in c.get("mechanism_cost_pct", {}).items():
                lines.append(f"  cost of {MECHANISMS[mech]}: {cost:.2f} % of a core")
            lines.append("")
    return "\n".join(report.wrap(lines[:-1]) + report.legend_lines(None, LEGEND, "bench/idle_cpu.py")) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab", choices=sorted(LABS), default="default")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--before", metavar="REV", help="each case twice, in turn: the agents of this commit "
                    "(kept as 'before') and of the work tree ('after'); without it, the work tree ('current')")
    ap.add_argument("--window", type=float, default=20.0, help="seconds measured idle (default 20)")
    ap.add_argument("--settle", type=float, default=None, help="seconds after verified before the window "
                    "(default 5; the segment 20)")
    ap.add_argument("--timeout", type=float, default=None, help="up's timeout (default 120; the segment 300)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--summary", action="store_true", help="only rewrite summary.txt from results.json")
    from hpnlab.instrument import machineload  # noqa: E402  (the quiet-machine check)
    machineload.add_argument(ap)
    a = ap.parse_args()
    machineload.settle_or_exit(a.busy_ok)  # quiet machine first, else exit 2 (--busy-ok: recorded busy)
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "results.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    if not a.summary:
        cases = [c.strip() for c in a.cases.split(",") if c.strip()]
        bad = [c for c in cases if c not in CASES]
        if bad:
            print(f"idle_cpu: unknown case(s) {', '.join(bad)}", file=sys.stderr)
            return 2
        seg = a.lab == "segment"
        settle = a.settle if a.settle is not None else (20.0 if seg else 5.0)
        timeout = a.timeout if a.timeout is not None else (300.0 if seg else 120.0)
        from hpnlab.instrument import provenance

        codes = [("before", a.before), ("after", None)] if a.before else [("current", None)]
        for c in cases:
            for code, rev in codes:  # alternating, so a drift of the machine falls on both alike
                with AgentsFrom(rev):
                    row = measure(a.lab, c, a.window, settle, timeout)
                entry = doc.setdefault("labs", {}).setdefault(a.lab, {}).setdefault(code, {"cases": {}})
                entry["label"] = code_label(rev)
                entry["cases"][c] = row
                entry["mechanism_cost_pct"] = mechanism_costs(entry["cases"])
        doc["provenance"] = provenance.collect()
        doc.setdefault("window_s", a.window)
        path.write_text(json.dumps(doc, indent=1) + "\n")
    (a.out / "summary.txt").write_text(summary(doc))
    print(summary(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

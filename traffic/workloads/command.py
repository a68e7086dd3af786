"""command: the user's own program as the workload, one rank per host (a torch.distributed job, an MPI
rank, any collective code), started together in the hosts' namespaces and stopped at the run's end.

workload.argv is a template: ``{rank}``, ``{world}``, ``{master}`` (rank 0's address on the rail),
``{port}``, ``{iface}`` (the interface holding the host's rail address), ``{rail}``, ``{addr}`` (the rank's
own address), ``{host}``, ``{local_rank}``, ``{here}`` (the experiment file's folder) and ``{python}``
(hpnlab's interpreter) are filled in per rank, and the same figures are in the rank's environment under the
names torch.distributed and MPI launchers use (``env_of``). Each rank runs under hpnlab.node.programs.command, which
keeps its stdout and stderr and its exit code, and stops its process group at the window's end.

The per-iteration contract: the program prints one JSON line per iteration on stdout, ``{"t": <unix time
the iteration completed>, "dur": <its seconds>}`` (other lines are ignored). ``report_rank``'s lines are the
workload's progress: the same series, throughput during a fault, halts and recovery after the repair the
built-in all-reduce gives (its analysis, not a copy of it).
"""

from __future__ import annotations

import json
import statistics
import string
import sys
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from hpnlab.errors import SpecError
from hpnlab.traffic.workloads.allreduce import AllReduce
from hpnlab.traffic.workloads.base import WorkloadKind, WorkloadParams, check_hosts, congestion_of, register

PLACEHOLDERS = ("rank", "world", "master", "port", "iface", "rail", "addr", "host", "local_rank", "here", "python")
# what a placeholder stands for when a template is checked before any lab exists (the types matter: a
# format spec such as {rank:02d} must suit the value it will get)
SAMPLE = {"rank": 0, "world": 2, "master": "10.0.0.2", "port": 29500, "iface": "r0p0", "rail": 0,
          "addr": "10.0.0.2", "host": "s0h0", "local_rank": 0, "here": "/", "python": "python3"}
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
TAIL_LINES = 5  # the last lines of a crashed rank's stderr (and stdout) kept in results.json
STALL_FRACTION = 0.9  # a repetition stalled when its longest halt in a fault covered this share of the fault


def render(template: str, values: dict) -> str:
    """One argv item or environment value with the placeholders filled in ({{ and }} stand for braces)."""
    return template.format_map(values)


def check_template(template: str, field: str) -> None:
    """ValueError naming ``field`` when ``template`` uses a placeholder that is not one of PLACEHOLDERS, an
    attribute or index of one, or a format that does not suit its value."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise ValueError(f"{field}: {e} in {template!r} (write {{{{ and }}}} for literal braces)") from None
    for _text, name, _spec, _conv in parsed:
        if name is None:
            continue
        if name not in PLACEHOLDERS:
            raise ValueError(f"{field}: unknown placeholder {{{name}}} in {template!r}; known: "
                             + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS))
    try:
        render(template, SAMPLE)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{field}: {template!r} cannot be filled in: {e}") from None


class CommandParams(WorkloadParams):
    argv: list[str] = Field(..., min_length=1, description=(
        "the program and its arguments, one list item each (never a shell line), with placeholders filled in "
        "per rank: {rank} {world} {master} {port} {iface} {rail} {addr} {host} {local_rank} {here} {python}"))
    hosts: list[str] | None = Field(None, description="rank i runs on hosts[i] (default: every host, sorted)")
    port: int = Field(29500, ge=1024, le=65535, description="the rendezvous port on rank 0 ({port}, MASTER_PORT)")
    env: dict[str, str] = Field(default_factory=dict, description=(
        "more environment for every rank, values with the same placeholders"))
    warmup: float = Field(0.0, ge=0, le=120, description=(
        "seconds the ranks start before the run's traffic, so imports and rendezvous are over before the "
        "baseline is measured"))
    grace: float = Field(5.0, gt=0, le=15, description="seconds from the window's end's SIGTERM to SIGKILL")
    report_rank: int = Field(0, ge=0, description="whose per-iteration lines are the workload's progress")

    @field_validator("argv")
    @classmethod
    def _argv(cls, v: list[str]) -> list[str]:
        for i, item in enumerate(v):
            check_template(item, f"argv[{i}]")
        if not v[0].strip():
            raise ValueError("argv[0]: the program is empty")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        import re

        for k, val in v.items():
            if not re.match(ENV_NAME, k):
                raise ValueError(f"env: {k!r} is not an environment variable name")
            check_template(val, f"env.{k}")
        return v

    @model_validator(mode="after")
    def _world(self) -> "CommandParams":
        if self.hosts is not None and not self.hosts:
            raise ValueError("hosts: give at least one host (or leave it out: every host)")
        if self.hosts is not None and self.report_rank >= len(self.hosts):
            raise ValueError(f"report_rank: {self.report_rank} is not a rank of {len(self.hosts)}")
        return self


def iface_of(cfg, rail: int, driver: str) -> str:
    """The interface that holds a host's rail address: its bond under the kernel's bonding driver, else
    (the userspace driver puts the address on both ports) port 0."""
    from hpnlab.node.plan import bond_name

    return bond_name(rail) if driver == "bond" else cfg.nic(rail).ports[0]


def rank_values(plan, rank: int, ranks: list[str], driver: str) -> dict:
    """The placeholders' values for ``rank`` of the job ``ranks`` (host per rank)."""
    w = plan.workload
    host = ranks[rank]
    here = str(Path(plan.source).resolve().parent) if getattr(plan, "source", None) else str(Path.cwd())
    return {"rank": rank, "world": len(ranks), "master": plan.host_ip(ranks[0], w.rail), "port": w.port,
            "iface": iface_of(plan.cfgs[host], w.rail, driver), "rail": w.rail, "addr": plan.host_ip(host, w.rail),
            "host": host, "local_rank": ranks[:rank].count(host), "here": here, "python": sys.executable}


def env_of(values: dict, ranks: list[str], extra: dict[str, str]) -> dict[str, str]:
    """A rank's environment: torch.distributed's names (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
    LOCAL_RANK, LOCAL_WORLD_SIZE), gloo's and NCCL's interface (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME),
    hpnlab's own (HPNLAB_*), unbuffered Python output (each iteration's line is on disk when it is printed,
    also when the rank is killed) and the experiment's ``env``, filled in."""
    env = {"RANK": values["rank"], "WORLD_SIZE": values["world"], "MASTER_ADDR": values["master"],
           "MASTER_PORT": values["port"], "LOCAL_RANK": values["local_rank"],
           "LOCAL_WORLD_SIZE": ranks.count(values["host"]), "GLOO_SOCKET_IFNAME": values["iface"],
           "NCCL_SOCKET_IFNAME": values["iface"], "HPNLAB_IFACE": values["iface"], "HPNLAB_RAIL": values["rail"],
           "HPNLAB_ADDR": values["addr"], "HPNLAB_HOST": values["host"], "PYTHONUNBUFFERED": 1}
    env = {k: str(v) for k, v in env.items()}
    env.update({k: render(v, values) for k, v in extra.items()})
    return env


def parse_iterations(text: str) -> tuple[list[tuple[float, float]], int]:
    """A rank's stdout as (t, dur) per iteration line, in the order printed, and how many lines were not
    iteration lines (the program's other output; a line cut off by a kill)."""
    its, other = [], 0
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            d = json.loads(line)
            t, dur = d["t"], d["dur"]
            ok = isinstance(t, (int, float)) and isinstance(dur, (int, float)) and not isinstance(t, bool) \
                and not isinstance(dur, bool) and t > 0 and dur >= 0
        except (ValueError, TypeError, KeyError):
            ok = False
        if ok:
            its.append((float(t), float(dur)))
        else:
            other += 1
    return its, other


def status_of(rep: dict) -> str:
    """How a rank ended: stopped (by the run's end; killed if it needed SIGKILL), finished (exited 0 by
    itself), crashed (exited non-zero or by a signal by itself), not started."""
    if rep.get("exit_code") is None:
        return "not started"
    if rep.get("stopped"):
        return "killed" if rep.get("killed") else "stopped"
    return "finished" if rep["exit_code"] == 0 else "crashed"


def tail(path: Path, n: int = TAIL_LINES) -> list[str]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [ln[-300:] for ln in lines[-n:]]


@register
class Command(WorkloadKind):
    kind = "command"
    help = ("your own program, one rank per host (torch.distributed, MPI, ...); its per-iteration JSON lines "
            "are the throughput")
    series_label = "command iterations"
    doc = (
        "Rank i runs `workload.argv` on `hosts[i]` (one list item per argument, never a shell line), started at "
        "the same wall-clock time (`warmup` seconds before the probes start, so imports and the rendezvous are "
        "over before the baseline), in a process group of its own. Placeholders, filled in per rank: `{rank}`, "
        "`{world}` (the number of ranks), `{master}` (rank 0's address on the rail), `{port}` (`workload.port`), "
        "`{iface}` (the interface holding the host's rail address: `bond<rail>` with the kernel bond, else port "
        "0), `{rail}`, `{addr}` (the rank's own address), `{host}`, `{local_rank}`, `{here}` (the experiment "
        "file's folder), `{python}` (hpnlab's interpreter); `{{` and `}}` are braces. The same figures are in "
        "every rank's environment: `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, `LOCAL_RANK`, "
        "`LOCAL_WORLD_SIZE`, `GLOO_SOCKET_IFNAME` and `NCCL_SOCKET_IFNAME` (the interface), `HPNLAB_IFACE`, "
        "`HPNLAB_RAIL`, `HPNLAB_ADDR`, `HPNLAB_HOST`, and `PYTHONUNBUFFERED=1`; `workload.env` adds more. An "
        "unknown placeholder, a host not in the lab or a rank beyond the job is refused before any lab comes "
        "up.\n\n"
        "**The per-iteration contract**: the program prints one line per iteration on stdout, the JSON object "
        "`{\"t\": <unix time the iteration completed>, \"dur\": <its seconds>}`, and flushes it; other lines "
        "are ignored. `report_rank`'s lines are the workload's progress: its series in plot.png, `workload %`, "
        "the longest halt and `workload back ms` in summary.txt, computed as for `allreduce` "
        "([results](results.md)).\n\n"
        "At the window's end every rank's process group gets SIGTERM and, `grace` seconds later, SIGKILL. "
        "`raw/<variant>/rep<k>/command-<rank>.stdout`, `.stderr` and `.json` keep each rank's output and how it "
        "ended; results.json's `runs[].workload.ranks` says per rank `status` (`stopped` by the window's end, "
        "`killed` if that took SIGKILL, `finished` by itself with exit 0, `crashed`, `not started`), "
        "`exit_code` (negative: the signal) and the iterations it printed, with the last lines of a crashed "
        "rank's stderr and stdout. A crash is a result: the variant's `command` record counts the repetitions "
        "with a crashed rank and those in which the job stalled (halted for 90 % of a fault), and summary.txt "
        "says which rank and its last line. A rank's sockets are its program's: they run the kernel's default "
        "congestion control (each rank's report reads it in its namespace; results.json's `congestion.ran`), "
        "unless the program sets its own, so `workload.congestion` is refused.")
    Params = CommandParams
    tcp = False  # its sockets are the program's: workload.congestion cannot be set on them (see check)

    def check(self, w, spec, cfgs, where):
        if "congestion" in w.model_fields_set:
            raise SpecError(f"{where} workload.congestion: a command workload's sockets are its program's; they "
                            f"run the kernel's default congestion control (results.json provenance says which)")
        check_hosts(f"{where} workload.hosts", list(w.hosts or []), cfgs, w.rail)
        hosts = w.hosts or sorted(n for n, c in cfgs.items() if c.role == "host")
        check_hosts(f"{where} workload", hosts, cfgs, w.rail)
        if w.report_rank >= len(hosts):
            raise SpecError(f"{where} workload.report_rank: {w.report_rank} is not a rank of {len(hosts)}")

    def lead(self, w) -> float:
        return w.warmup

    def prepare_variant(self, lab, plan, raw, progress):
        plan.host_driver = lab.info.get("host_driver") or "userspace"  # where the rail address is: {iface}
        return {}

    def launch(self, plan, run_dir, t0, duration):
        w = plan.workload
        ranks = plan.ring()
        driver = getattr(plan, "host_driver", "userspace")
        procs = []
        for rank, host in enumerate(ranks):
            values = rank_values(plan, rank, ranks, driver)
            argv = [render(a, values) for a in w.argv]
            env = env_of(values, ranks, w.env)
            base = run_dir / f"command-{rank}"
            procs.append({"role": "command", "node": host, "out": f"{base}.json", "rank": rank,
                          "argv": [sys.executable, "-m", "hpnlab.node.programs.command", "--rank", str(rank),
                                   "--start-at", f"{t0 - w.warmup:.3f}", "--stop-at", f"{t0 + duration:.3f}",
                                   "--grace", f"{w.grace:g}", "--stdout", f"{base}.stdout", "--stderr",
                                   f"{base}.stderr", "--out", f"{base}.json",
                                   *(f"--env={k}={v}" for k, v in env.items()), "--", *argv]})
        return procs

    def result(self, plan, run_dir):
        w = plan.workload
        hosts = plan.ring()
        ranks, series, reports = [], {}, []
        for rank, host in enumerate(hosts):
            base = run_dir / f"command-{rank}"
            try:
                rep = json.loads(base.with_suffix(".json").read_text())
            except (OSError, ValueError):
                rep = {"error": "no report (the wrapper did not finish)"}
            reports.append(rep)
            try:
                its, other = parse_iterations(base.with_suffix(".stdout").read_text(errors="replace"))
            except OSError:
                its, other = [], 0
            series[rank] = its
            st = status_of(rep)
            r = {"rank": rank, "host": host, "status": st, "exit_code": rep.get("exit_code"),
                 "killed": bool(rep.get("killed")), "iterations": len(its), "other_lines": other}
            if rep.get("error"):
                r["error"] = rep["error"]
            if st in ("crashed", "not started"):
                r["stderr_tail"] = tail(base.with_suffix(".stderr"))
                r["stdout_tail"] = tail(base.with_suffix(".stdout"))
            ranks.append(r)
        mine = series.get(w.report_rank, [])
        return {"kind": "command", "world": len(hosts), "report_rank": w.report_rank,
                "iterations": sorted(t for t, _d in mine),
                "iteration_ms": round(1000 * statistics.median(d for _t, d in mine), 3) if mine else None,
                "ranks": ranks, "crashed": [r["rank"] for r in ranks if r["status"] in ("crashed", "not started")],
                # the namespaces' default, which the program's sockets run unless it sets its own
                "congestion": congestion_of(reports)}

    # the built-in all-reduce's analysis of completion times, unchanged: a command's iterations are its marks
    rate_series = AllReduce.rate_series
    window = AllReduce.window
    recovery = AllReduce.recovery

    def aggregate(self, runs):
        """How the ranks ended over the repetitions, and in how many repetitions the job stalled in a fault
        (its longest halt covered STALL_FRACTION of the fault's window)."""
        crashed = [(k + 1, r) for k, run in enumerate(runs) for r in (run.get("workload") or {}).get("ranks", [])
                   if r["status"] in ("crashed", "not started")]
        stalled = []
        for k, run in enumerate(runs):
            for f in run.get("faults", []):
                end = f["reverted_s"] if f.get("reverted_s") is not None else None
                halt = (f.get("workload") or {}).get("longest_halt_ms")
                if end is not None and halt is not None and halt >= STALL_FRACTION * 1000 * (end - f["applied_s"]):
                    stalled.append(k + 1)
                    break
        return {"command": {"repetitions": len(runs), "crashed_runs": len({k for k, _r in crashed}),
                            "crashed_ranks": [{"repetition": k, **r} for k, r in crashed],
                            "stalled_runs": len(stalled), "stalled": stalled}}

    def summary_lines(self, vname, v):
        c = v.get("command")
        if not c:
            return []
        out = [f"command {vname}: stalled (halted for >= {STALL_FRACTION:.0%} of a fault) in {c['stalled_runs']} "
               f"of {c['repetitions']} repetitions" + (f" ({', '.join(map(str, c['stalled']))})" if c["stalled"] else "")
               + f"; a rank crashed in {c['crashed_runs']}"]
        for r in c["crashed_ranks"]:
            last = (r.get("stderr_tail") or r.get("stdout_tail") or [r.get("error") or ""])[-1]
            out.append(f"  repetition {r['repetition']} rank {r['rank']} on {r['host']}: {r['status']}, exit "
                       f"{r['exit_code']}: {last}")
        return out

    def raw_needed(self, raw):
        return []


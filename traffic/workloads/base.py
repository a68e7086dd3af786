"""What every workload kind provides, and the registry (``register``, ``get``, ``names``). A workload is
the training-like traffic an experiment runs beside its probes; each kind is one class in a file of its
own in this package, so a new kind is one file (its parameters are keys of the experiment file's
``workload:``, see docs/experiment-file.md)."""

from __future__ import annotations

import bisect
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hpnlab.errors import SpecError
from hpnlab.model.models import NodeConfig
from hpnlab.node.programs import tcpcc

START_SLACK = 2.0  # seconds between launching a repetition's processes and its common start time t0
CONGESTION_DEFAULT = tcpcc.DEFAULT  # Debian's and Ubuntu's kernels' default (docs/experiments.md: congestion control)
CONGESTION_NAME = re.compile(r"[a-z][a-z0-9_]{0,14}")  # a kernel algorithm's name (TCP_CA_NAME_MAX 16)
RECOVERED_FRACTION = 0.9  # a workload is back when it runs at this share of its pre-fault rate again


class WorkloadParams(BaseModel):
    """Keys every workload takes; a kind's own ``Params`` subclass adds its keys and their defaults."""

    model_config = ConfigDict(extra="forbid")
    kind: str = Field("none", description="which workload (the kinds below)")
    rail: int = Field(0, ge=0, description="which rail (NIC) of the hosts the workload uses")
    congestion: str = Field(CONGESTION_DEFAULT, description=(
        "TCP congestion control set on every socket of the workload (every kind but none), whatever the "
        "kernel's default is (cubic: Debian's and Ubuntu's default); one the kernel has or can load, else the "
        "run is refused before any lab comes up"))
    dscp: int | None = Field(None, ge=0, le=63, description=(
        "the workload's traffic class: every connection is marked with this DSCP (0..63) at both ends (IP_TOS on "
        "every socket; Linux does not reflect a connection's TOS in its replies), and a lab with qos queues it "
        "where qos.dscp maps it; kinds allreduce, alltoall and elephant (default: unmarked, DSCP 0)"))

    @field_validator("congestion")
    @classmethod
    def _congestion(cls, v: str) -> str:
        if not CONGESTION_NAME.fullmatch(v):
            raise ValueError(f"'{v}' is not a TCP congestion control name (a kernel's, such as cubic, reno or bbr)")
        return v


class WorkloadKind:
    """One kind of workload. ``kind`` names it in experiment files, ``Params`` its keys (a pydantic model);
    the rest are hooks with defaults."""

    kind = ""
    help = ""
    doc = ""  # more about the kind for docs/experiment-file.md (a paragraph after ``help``), where it needs it
    Params: type[WorkloadParams] = WorkloadParams
    series_label = ""  # what ``rate_series`` measures, for the plot's legend ("" : nothing to draw)
    own_report = False  # True: summary.txt and plot.png come from summary_table/plot below, not the probes'
    tcp = True  # its processes send TCP: workload.congestion is set on their sockets and checked against the kernel
    marks = False  # its programs mark every socket, both ends, with workload.dscp (else a dscp is refused)

    def parse(self, data: dict, where: str) -> WorkloadParams:
        """The experiment file's ``workload:`` mapping as this kind's parameters; one line naming the key."""
        try:
            w = self.Params.model_validate(data)
        except ValidationError as err:
            e = err.errors(include_url=False)[0]
            key = ".".join(str(x) for x in e["loc"]) or "workload"
            if e["type"] == "extra_forbidden":
                known = ", ".join(self.Params.model_fields)
                raise SpecError(f"{where}: experiment field 'workload.{key}': not a key of workload kind "
                                f"'{self.kind}' (its keys: {known})") from None
            raise SpecError(f"{where}: experiment field 'workload.{key}': {e['msg']}") from None
        if w.dscp is not None and not self.marks:
            # a class half the connection's packets ignore (or none do) would be measured as if it held
            raise SpecError(f"{where}: experiment field 'workload.dscp': workload kind '{self.kind}' cannot mark "
                            f"its traffic at both ends; kinds that do: {', '.join(k for k, c in REGISTRY.items() if c.marks)}")
        return w

    def check(self, w, spec, cfgs: dict[str, NodeConfig], where: str) -> None:
        """Refuse, in one line, what this kind cannot run (before any lab comes up)."""

    def lead(self, w) -> float:
        """Seconds before the run's common start (t0) this kind's processes start of their own accord (a
        user's program importing its libraries and meeting its peers): the runner launches that much earlier."""
        return 0.0

    def prepare_variant(self, lab, plan, raw: Path, progress) -> dict:
        """Once per variant on its running ``hpnlab.Lab``, before the repetitions; what it returns goes
        into the variant's results. ``progress(str)`` prints a step."""
        return {}

    def prepare_repetition(self, plan, raw: Path, run_dir: Path, k: int) -> None:
        """Before repetition k (0-based)."""

    def launch(self, plan, run_dir: Path, t0: float, duration: float) -> list[dict]:
        """The processes of one repetition (pure): {role, node, argv, out} and, where needed, ``delay``
        (started at t0, not with the others), ``stdout_report`` (the program prints its report on stdout
        instead of writing ``out`` itself), ``settle`` (seconds to wait after starting it: a server binding)
        and ``may_fail`` (a non-zero exit is in its report, not a crash of the run)."""
        return []

    def done(self, procs: list) -> bool:
        """True when the workload ended the repetition early (its work is all delivered)."""
        return False

    def after_repetition(self, lab, plan, run_dir: Path) -> None:
        """On the running lab, right after a repetition's traffic ended (before the next one): read what only
        the lab can tell into ``run_dir`` for ``result`` (the all-reduce's and elephants' path check)."""
        return None

    def result(self, plan, run_dir: Path) -> dict | None:
        """The repetition's workload report, read from run_dir; a TCP kind's has ``congestion``: the
        algorithm its sockets ran, as its programs read it back (``congestion_of``)."""
        return None

    def rate_series(self, w: dict, t0: float, bin_s: float = 0.25) -> list[tuple[float, float]]:
        """(seconds since t0, rate) of the workload's progress, for its throughput during a fault."""
        return []

    def window(self, w: dict, t0: float, base_end: float, start: float, end: float) -> dict:
        """The workload in one fault's window [start, end) against its baseline [t0 + 0.5, base_end):
        ``throughput_pct`` and whatever else the kind measures."""
        return {}

    def recovery(self, w: dict, t0: float, base_end: float, repair: float, window_end: float) -> dict:
        """The workload after a fault's repair at ``repair`` until ``window_end``: ``recovery_ms`` (from the
        repair until it ran at >= RECOVERED_FRACTION of its baseline rate again), ``recovered`` (it did
        within the window; if not, ``recovery_ms`` is the window's rest, a lower bound) and
        ``halt_after_repair_ms``. {} where the kind has no rate to judge."""
        return {}

    def aggregate(self, runs: list[dict]) -> dict:
        """Variant-level figures over the repetitions (added to the variant's results)."""
        return {}

    def across_variants(self, results: dict) -> dict:
        """Experiment-level figures that compare variants (added to results.json at its top); {} for none."""
        return {}

    def summary_lines(self, vname: str, v: dict) -> list[str]:
        """Lines of summary.txt under the table about variant ``vname``'s workload (results.json's ``v``)."""
        return []

    def raw_needed(self, raw: Path) -> list[Path]:
        """Files a re-analysis needs beyond each repetition's run.json."""
        return []

    def reanalyse(self, v: dict, raw: Path, plan, runs: list[dict]) -> dict:
        """The variant-level figures recomputed from raw/ (--reanalyse)."""
        return self.aggregate(runs)

    # own_report: a one-line legend of every column or figure name summary_table prints (summary.txt's end),
    # and the page that says more
    legend: dict[str, str] = {}
    legend_page = "docs/results.md"

    def summary_table(self, results: dict) -> str:
        """summary.txt of an experiment whose variants run this kind (``own_report``), at most textlayout.WIDTH
        wide; summary.txt goes on with the lateness meter's lines and ends with ``legend``."""
        raise NotImplementedError

    def plot(self, results: dict, path: Path) -> Path | None:
        """plot.png of such an experiment; None where matplotlib is missing or nothing finished."""
        raise NotImplementedError


REGISTRY: dict[str, WorkloadKind] = {}


def register(cls: type[WorkloadKind]) -> type[WorkloadKind]:
    REGISTRY[cls.kind] = cls()
    return cls


def get(kind: str) -> WorkloadKind:
    try:
        return REGISTRY[kind]
    except KeyError:
        raise SpecError(f"workload.kind: '{kind}' is not a workload; choose one of {', '.join(REGISTRY)}") from None


def names() -> list[str]:
    return list(REGISTRY)


def senders_done(procs: list, tx_role: str, stop_roles: tuple[str, ...]) -> bool:
    """A batch workload's end: every ``tx_role`` process has exited (its bytes delivered); the processes of
    ``stop_roles`` (receivers, samplers) are then told to stop and write their reports."""
    tx = [p for spec, p in procs if spec["role"] == tx_role]
    if not tx or any(p.poll() is None for p in tx):
        return False
    for spec, p in procs:
        if spec["role"] in stop_roles and p.poll() is None:
            p.terminate()
    return True


def congestion_of(reports: list[dict]) -> str | None:
    """The congestion control a repetition's processes ran, from their reports' ``congestion`` ("a,b" if they
    differed; None where none said: a report written before hpnlab recorded it)."""
    names = {n for r in reports for n in (r.get("congestion") or "").split(",") if n}
    return ",".join(sorted(names)) or None


def dscp_args(w: WorkloadParams) -> list[str]:
    """A node program's ``--dscp`` for ``w.dscp`` (nothing when unmarked: the command line stays as before)."""
    return [] if w.dscp is None else ["--dscp", str(w.dscp)]


def check_hosts(where: str, names_: list[str | None], cfgs: dict[str, NodeConfig], rail: int) -> None:
    hosts = sorted(n for n, c in cfgs.items() if c.role == "host")
    for n in names_:
        if n is None:
            continue
        if n not in hosts:
            raise SpecError(f"{where}: '{n}' is not a host of this lab; hosts: {', '.join(hosts)}")
        if cfgs[n].nic(rail) is None:
            raise SpecError(f"{where}.rail: host {n} has no rail {rail}")


def recovered_at(marks: list[float], base_rate: float, repair: float, window_end: float) -> dict:
    """When a workload whose progress is ``marks`` (completion times, one per unit of work) was back at
    RECOVERED_FRACTION of ``base_rate`` (units/s) after ``repair``: the first c among the repair and the
    marks after it from which the next span (1 s, or 10 units at the baseline rate if that is longer; near
    the window's end what is left of it, at least 5 units' time) completes at least that share of the
    baseline's units. A workload that never gets there within the window is not recovered, and its
    recovery_ms is the window's rest (a lower bound)."""
    after = sorted(t for t in marks if repair <= t < window_end)
    gaps = [b - a for a, b in zip([repair] + after, after + [window_end])]
    out: dict = {"halt_after_repair_ms": round(max(gaps) * 1000, 1)}
    if base_rate <= 0:
        return out
    full = max(1.0, 10.0 / base_rate)
    for c in [repair] + after:
        # near the window's end the span shrinks to what is left, down to 5 units at the baseline rate
        span = min(full, window_end - c)
        if span < 5.0 / base_rate:
            break
        done = bisect.bisect_left(after, c + span) - bisect.bisect_right(after, c)  # completed in (c, c + span)
        if done >= RECOVERED_FRACTION * base_rate * span:
            return {**out, "recovery_ms": round((c - repair) * 1000, 1), "recovered": True}
    return {**out, "recovery_ms": round((window_end - repair) * 1000, 1), "recovered": False}

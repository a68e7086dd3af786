"""summary.txt's text, made from results.json alone: what a run writes at its end, what --reanalyse writes
again, and what report.html shows (hpnlab.traffic.output.htmlreport reads it here, not through the runner)."""

from __future__ import annotations

from hpnlab.traffic import workloads
from hpnlab.traffic.analysis import grayfigures, reorder, slip
from hpnlab.traffic.output import report


def own_kind(results: dict):
    """The workload kind every variant runs, where they all run one (None where they mix kinds)."""
    kinds = {workload_of(v) for v in results["variants"].values()}
    return workloads.get(kinds.pop()) if len(kinds) == 1 else None


def summary(results: dict) -> str:
    """summary.txt: of a failover experiment (every workload but those with their own report) a block per
    variant and fault; of one whose workload has its own report (``own_report``) that kind's table; under
    either the lines on the workload, the lateness meter, TCP and the prober, and the legend of every column
    or figure name last; no line wider than report.WIDTH."""
    kind = own_kind(results)
    if kind is not None and kind.own_report:
        extra = report.emulator_lines(results)
        extra += reorder.summary_lines(results)  # none for a run before tcpstats were read
        extra += grayfigures.summary_lines(results)  # none without a variant with the prober
        extra += slip.summary_lines(results)  # none for a run before the slip guard
        return "\n".join([kind.summary_table(results), *report.wrap(extra),
                          *report.legend_lines(list(kind.legend), kind.legend, kind.legend_page)])
    extra = [line for name, v in results["variants"].items()
             for line in workloads.get(workload_of(v)).summary_lines(name, v)]
    extra += reorder.summary_lines(results)  # none for a run before tcpstats were read
    extra += grayfigures.summary_lines(results)  # none without a variant with the prober
    extra += slip.summary_lines(results)  # none for a run before the slip guard
    return "\n".join([report.summary_table(results), *report.wrap(extra), *report.legend_lines()])


def workload_of(v: dict) -> str:
    """A variant's workload kind (results written before it was recorded: elephant runs left a path map)."""
    return v.get("workload") or ("elephant" if v.get("balance") else "none")

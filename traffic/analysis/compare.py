"""Baselines: every figure two runs of one experiment both hold, compared with a tolerance per figure, and
the reports a CI job reads (a table, JUnit XML, Markdown, JSON).

A figure in results.json is ``{n, min, median, max}`` over a run's repetitions. The candidate's median is
compared with the baseline's median; the tolerance is the baseline's own spread (max - min: how far its
repetitions already disagreed) plus how far a busy machine can move the figure, the lateness meter's
bound (``hpnlab.instrument.lateness.verdict``: 10 % of the figure or 5 ms, whichever is larger). What a figure
counts (flows black-holed) gets the spread alone: a busy machine delays a flow's recovery, it does not
make a flow silent for the whole fault. A count of flows that lost any packet gets the packets' bound: each
packet a busy machine may cost can be another flow's. ``KINDS`` says, per figure, which way is worse and which bound
applies; docs/baselines.md gives the table in words.
"""

from __future__ import annotations

import fnmatch
import json
import math
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hpnlab.instrument import lateness
from hpnlab.errors import SpecError

HIGHER, LOWER, INFO = "higher", "lower", "info"  # which way is worse; INFO: reported, never a regression
FEWER = "fewer"  # a count of repetitions that recovered: fewer is worse

# figure name (the results.json key's last part) -> (which way is worse, its bound):
#   ms / s   a time: the meter's bound (10 % of the figure or 5 ms) plus the spread
#   packets  probe packets lost: they are the gap times the flows' rate, so the bound is 10 % or 5 ms of
#            the stream's packets, whichever is more, plus the spread
#   count    flows black-holed or silent: the spread alone
#   flows    flows that lost any packet: as packets (each packet a busy machine may lose can be another flow's)
#   share    a % or ratio measured over time (the workload's throughput, a bulk run's link ratios):
#            10 % of the figure plus the spread (the meter's relative part; its 5 ms floor has no unit here)
#   map      the path map's figures (computed from the hash, not timed): the spread alone
KINDS: dict[str, tuple[str, str]] = {
    "converged_gap_ms": (HIGHER, "ms"), "longest_gap_ms": (HIGHER, "ms"), "after_repair_gap_ms": (HIGHER, "ms"),
    "recovery_after_repair_ms": (HIGHER, "ms"), "routes_last_ms": (HIGHER, "ms"),
    "lost_packets": (HIGHER, "packets"), "lost_after_repair": (HIGHER, "packets"),
    "lost_after_repair_1s": (HIGHER, "packets"),
    "blackholed_flows": (HIGHER, "count"), "silent_at_repair_flows": (HIGHER, "count"),
    "flows_affected": (HIGHER, "flows"),
    "workload.throughput_pct": (LOWER, "share"), "workload.longest_halt_ms": (HIGHER, "ms"),
    "workload.recovery_ms": (HIGHER, "ms"), "workload.halt_after_repair_ms": (HIGHER, "ms"),
    "bulk.completion_s": (HIGHER, "s"), "bulk.downlink_ratio": (HIGHER, "share"),
    "bulk.uplink_ratio": (HIGHER, "share"), "bulk.peak_backlog_kb": (HIGHER, "share"),
    "downlink_ratio": (HIGHER, "map"), "idle_link_fraction": (HIGHER, "map"), "ratio": (HIGHER, "map"),
    "idle_fraction": (HIGHER, "map"),
}
# Beside the figures, never judged: when the first route changed, where a converged gap's ms went (the
# converged gap itself is judged), a bulk link's byte share (closeness to its capacity share is the point,
# not a direction). Unknown figures (a new workload's) are reported as information too.
# Counts of repetitions: that recovered, that had the workload back, that kept the workload's program alive.
RUNS = ("recovered", "workload.back", "workload.alive")
SKIPPED = ("ignored", "baseline only", "candidate only", "no value")  # JUnit: reported, not judged


@dataclass
class Row:
    """One figure of one variant, fault and stream, on both sides."""
    variant: str
    fault: str
    stream: str
    figure: str
    key: str  # the results.json key (of whichever side holds it)
    worse: str  # HIGHER, LOWER or INFO
    baseline: dict | None
    candidate: dict | None
    tolerance: float | None = None
    limit: float | None = None
    verdict: str = ""  # worse | within | better | info | ignored | baseline only | candidate only | no value
    note: str = ""

    @property
    def name(self) -> str:
        return " / ".join((self.variant, self.fault, self.stream, self.figure))


@dataclass
class Comparison:
    experiment: str
    baseline: str
    candidate: str
    rows: list[Row]
    notes: list[str] = field(default_factory=list)
    variants_only: dict[str, list[str]] = field(default_factory=dict)  # side -> variants only it holds

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == "worse"]

    @property
    def ok(self) -> bool:
        return not self.regressions

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.verdict] = out.get(r.verdict, 0) + 1
        return out

    def headline(self) -> str:
        c = self.counts()
        judged = sum(c.get(k, 0) for k in ("worse", "within", "better"))
        return (f"{self.experiment}: {len(self.regressions)} regression(s) in {judged} judged figures "
                f"({c.get('within', 0)} within tolerance, {c.get('better', 0)} better; {c.get('info', 0)} "
                f"informational, {c.get('ignored', 0)} ignored, "
                f"{c.get('baseline only', 0) + c.get('candidate only', 0)} in one side only, "
                f"{c.get('no value', 0)} without a value)")

    def table(self, every: bool = False) -> str:
        """The rows that matter (regressions, one-side-only figures, improvements), or ``every`` row."""
        show = self.rows if every else [r for r in self.rows if r.verdict in ("worse", "better", "baseline only",
                                                                             "candidate only")]
        lines = [f"compare {self.experiment}: baseline {self.baseline} vs candidate {self.candidate}", *self.notes]
        for side, names in self.variants_only.items():
            lines.append(f"variants only in the {side} (not compared): {', '.join(names)}")
        if show:
            hdr = ["variant", "fault", "stream", "figure", "worse if", "baseline", "candidate", "limit", "verdict"]
            cells = [[r.variant, r.fault, r.stream, r.figure, r.worse, _mm(r.baseline), _mm(r.candidate),
                      _num(r.limit), r.verdict + (f" ({r.note})" if r.note else "")] for r in show]
            widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(hdr)]
            lines.append("  ".join(h.ljust(w) for h, w in zip(hdr, widths)).rstrip())
            lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
        lines.append(self.headline() + ("" if every else "; --all lists every figure"))
        return "\n".join(lines)

    def markdown(self) -> str:
        """A PR comment: the verdict, the regressions' table, every judged figure folded under it."""
        def table(rows: list[Row]) -> list[str]:
            out = ["| variant | fault | stream | figure | worse if | baseline | candidate | limit | verdict |",
                   "|---|---|---|---|---|---|---|---|---|"]
            for r in rows:
                cells = [r.variant, r.fault, r.stream, f"`{r.figure}`", r.worse, _mm(r.baseline), _mm(r.candidate),
                         _num(r.limit), f"**{r.verdict}**" if r.verdict == "worse" else r.verdict]
                if r.note:
                    cells[-1] += f" ({r.note})"
                out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
            return out

        title = "no regression" if self.ok else f"{len(self.regressions)} regression(s)"
        lines = [f"### hpnlab compare `{self.experiment}`: {title}", "",
                 f"baseline `{self.baseline}`, candidate `{self.candidate}`; each figure is min/median/max over "
                 f"the repetitions, the candidate's median is judged against the limit (the baseline's median "
                 f"plus its spread plus the lateness meter's bound).", ""]
        lines += [f"- {n}" for n in self.notes]
        lines += [f"- variants only in the {side} (not compared): {', '.join(v)}" for side, v in self.variants_only.items()]
        if self.notes or self.variants_only:
            lines.append("")
        if self.regressions:
            lines += table(self.regressions) + [""]
        lines.append(self.headline())
        rest = [r for r in self.rows if r.verdict != "worse"]
        if rest:
            lines += ["", "<details><summary>every other figure</summary>", "", *table(rest), "", "</details>"]
        return "\n".join(lines) + "\n"

    def junit(self) -> str:
        """JUnit XML: one testcase per figure; a regression is a failure, a figure one side lacks (or
        --ignore names) is skipped (reported, not failed)."""
        suite = ET.Element("testsuite", name=f"hpnlab compare {self.experiment}", tests=str(len(self.rows)),
                           failures=str(len(self.regressions)),
                           skipped=str(sum(r.verdict in SKIPPED for r in self.rows)),
                           errors="0")
        for r in self.rows:
            case = ET.SubElement(suite, "testcase", classname=f"{self.experiment}.{r.variant}",
                                 name=f"{r.fault} / {r.stream} / {r.figure}")
            detail = (f"{r.figure} ({r.key}): baseline {_mm(r.baseline)}, candidate {_mm(r.candidate)}, "
                      f"limit {_num(r.limit)} ({r.worse} is worse); {r.verdict}" + (f": {r.note}" if r.note else ""))
            if r.verdict == "worse":
                ET.SubElement(case, "failure", message=detail, type="regression").text = detail
            elif r.verdict in SKIPPED:
                ET.SubElement(case, "skipped", message=detail)
            else:
                ET.SubElement(case, "system-out").text = detail
        root = ET.Element("testsuites", name="hpnlab compare", tests=suite.get("tests"),
                          failures=suite.get("failures"), skipped=suite.get("skipped"), errors="0")
        root.append(suite)
        ET.indent(root)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

    def to_dict(self) -> dict:
        return {"experiment": self.experiment, "baseline": self.baseline, "candidate": self.candidate,
                "ok": self.ok, "regressions": len(self.regressions), "counts": self.counts(), "notes": self.notes,
                "variants_only": self.variants_only, "rows": [asdict(r) for r in self.rows]}

    def assert_no_regression(self) -> None:
        """For tests: ``Regression`` (an AssertionError) with the table when any figure got worse."""
        if not self.ok:
            raise Regression(self.table())


class Regression(AssertionError):
    pass


# --- loading -------------------------------------------------------------------------------------------------
def load(source: str | Path | dict, field_name: str = "baseline") -> tuple[dict, str]:
    """(results, what it was read from): a run's folder, its results.json, or the results dict itself.
    Bad input is one line naming ``field_name`` (exit 2)."""
    if isinstance(source, dict):
        if not isinstance(source.get("variants"), dict):
            raise SpecError(f"{field_name}: not an hpnlab results dict (no 'variants')")
        return source, "(results)"
    path = Path(source)
    file = path / "results.json" if path.is_dir() else path
    if not path.exists():
        raise SpecError(f"{field_name}: '{path}' not found; give a folder 'hpnlab run' wrote (it holds results.json)")
    if not file.is_file():
        raise SpecError(f"{field_name}: '{path}' holds no results.json; give a folder 'hpnlab run' wrote")
    try:
        results = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SpecError(f"{field_name}: '{file}' is not readable JSON ({str(e).splitlines()[0][:80]})") from None
    if not isinstance(results, dict) or not isinstance(results.get("variants"), dict) or "experiment" not in results:
        raise SpecError(f"{field_name}: '{file}' is not an hpnlab results.json (no 'experiment' and 'variants')")
    return results, str(path)


def split_variant(source: str | Path | dict) -> tuple[str | Path | dict, str | None]:
    """'RUN:VARIANT' -> (RUN, VARIANT): one variant of a run. A path that exists as given (a ':' in a folder's
    name) is a path, and so is one whose part before the last ':' does not exist."""
    if isinstance(source, dict) or Path(source).exists():
        return source, None
    run, sep, variant = str(source).rpartition(":")
    if sep and run and variant and Path(run).exists():
        return run, variant
    return source, None


def pick(results: dict, variant: str, field_name: str) -> None:
    """``variant`` must be one of the run's (one line naming them, exit 2)."""
    if variant not in results["variants"]:
        raise SpecError(f"{field_name}: the run has no variant '{variant[:60]}'; it has "
                        f"{', '.join(results['variants']) or 'none'}")


def check_pair(base: dict, cand: dict, variants: list[str] | None = None) -> None:
    """The two are runs of one experiment with a variant in common (``variants``: the candidate's, before it
    runs); else one line (exit 2)."""
    if base.get("experiment") != cand.get("experiment"):
        raise SpecError(f"experiment: the baseline is '{base.get('experiment')}', the candidate "
                        f"'{cand.get('experiment')}'; compare runs of one experiment")
    have = list(cand["variants"]) if variants is None else variants
    if not set(have) & set(base["variants"]):
        raise SpecError(f"variants: none in common (baseline: {', '.join(base['variants']) or 'none'}; "
                        f"candidate: {', '.join(have) or 'none'})")


# --- the figures ---------------------------------------------------------------------------------------------
@dataclass
class _Fig:
    key: str
    value: dict  # {n, min, median, max}, or {ok, n} for a count of runs
    pps: float | None = None  # a probe stream's packets/s (packets' bound)
    flagged: int | None = None  # in how many repetitions the meter flagged this figure (faults' JUDGED figures)
    judged: int | None = None
    window_flagged: int | None = None  # a figure the meter does not judge itself (a stream's, the workload's):
    #                                    in how many repetitions the window of its fault was flagged


def _is_summary(x) -> bool:
    return isinstance(x, dict) and "median" in x and "n" in x


def _stream_pps(v: dict) -> dict[str, float]:
    """Each probe stream's packets/s (and 'all': their sum), from the variant's first repetition."""
    runs = v.get("runs") or []
    probes = (runs[0].get("probes") or {}) if runs else {}
    pps = {s: float(p["requested_pps"]) for s, p in probes.items() if p.get("requested_pps")}
    if pps:
        pps["all"] = sum(pps.values())
    return pps


def fault_labels(variant: dict) -> list[str]:
    """Each fault's name in the comparison, in timeline order: its label, '#2' on for the same fault again."""
    out, seen = [], {}
    for k, f in enumerate(variant.get("faults") or []):
        label = f.get("fault", f"fault {k}")
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")  # a flap: its own figures
    return out


def figures(results: dict) -> dict[str, dict[tuple[str, str, str], _Fig]]:
    """variant -> (fault, stream, figure) -> the figure, for every summary results.json holds outside the
    repetitions' own records (the meter's own figures go beside them as flags, not as figures)."""
    out: dict[str, dict[tuple[str, str, str], _Fig]] = {}
    for vname, v in results["variants"].items():
        figs: dict[tuple[str, str, str], _Fig] = {}
        pps = _stream_pps(v)
        for k, (f, label) in enumerate(zip(v.get("faults") or [], fault_labels(v))):
            base = f"variants.{vname}.faults.{k}"
            em = f.get("emulator") or {}
            flags = em.get("flagged_figures") or {}
            for name, x in f.items():
                if _is_summary(x):
                    own = name in _judged()
                    figs[(label, "all", name)] = _Fig(f"{base}.{name}", x, pps.get("all"),
                                                      flags.get(name, 0) if own and em.get("judged") else None,
                                                      em.get("judged"), None if own else em.get("flagged"))
                elif name not in ("streams", "emulator", "timeline", "route_monitor") and isinstance(x, dict):
                    # the workload's figures, the split of the converged gap, a failed router's load on its peers
                    for m, y in x.items():
                        if _is_summary(y):
                            figs[(label, "all", f"{name}.{m}")] = _Fig(f"{base}.{name}.{m}", y, judged=em.get("judged"),
                                                                       window_flagged=em.get("flagged"))
            if "recovered_runs" in f:
                figs[(label, "all", "recovered")] = _Fig(f"{base}.recovered_runs",
                                                         {"ok": f["recovered_runs"], "n": f.get("repetitions")})
            wl = f.get("workload") or {}
            if "recovered_runs" in wl:
                figs[(label, "all", "workload.back")] = _Fig(f"{base}.workload.recovered_runs",
                                                             {"ok": wl["recovered_runs"], "n": wl.get("judged")})
            if "dead_runs" in wl and wl.get("judged"):  # repetitions in which the workload's program died
                figs[(label, "all", "workload.alive")] = _Fig(f"{base}.workload.dead_runs",
                                                               {"ok": wl["judged"] - wl["dead_runs"], "n": wl["judged"]})
            for s, m in (f.get("streams") or {}).items():
                for name, x in m.items():
                    if _is_summary(x):  # the meter judges the fault's window, which the stream's figures share
                        figs[(label, s, name)] = _Fig(f"{base}.streams.{s}.{name}", x, pps.get(s),
                                                      judged=em.get("judged"), window_flagged=em.get("flagged"))
                if "recovered_runs" in m:
                    figs[(label, s, "recovered")] = _Fig(f"{base}.streams.{s}.recovered_runs",
                                                         {"ok": m["recovered_runs"], "n": f.get("repetitions")})
        for top, x in v.items():  # a workload's own figures outside the faults (bulk, balance)
            if top not in ("runs", "faults") and isinstance(x, dict):
                _walk(x, [top], f"variants.{vname}", figs)
        out[vname] = figs
    return out


def _judged() -> tuple[str, ...]:
    from hpnlab.traffic.output.report import JUDGED

    return JUDGED


def _walk(x: dict, path: list[str], base: str, figs: dict) -> None:
    for k, y in x.items():
        if _is_summary(y):
            name = f"{path[0]}.{k}" if f"{path[0]}.{k}" in KINDS else k
            figs[("-", ".".join(path), name)] = _Fig(f"{base}.{'.'.join(path)}.{k}", y)
        elif isinstance(y, dict):
            _walk(y, path + [str(k)], base, figs)


# --- judging ---------------------------------------------------------------------------------------------------
def kind_of(figure: str) -> tuple[str, str | None]:
    """(which way is worse, its bound's kind) of a figure; (INFO, None) for one that is not judged."""
    if figure in RUNS:
        return FEWER, "runs"
    return KINDS.get(figure, (INFO, None))


def bound(kind: str, median: float, pps: float | None = None) -> float:
    """How far a busy machine can move a figure of this kind (docs/baselines.md)."""
    if kind == "ms":
        return max(lateness.FLOOR_MS, lateness.FRACTION * abs(median))
    if kind == "s":
        return max(lateness.FLOOR_MS / 1000, lateness.FRACTION * abs(median))
    if kind in ("packets", "flows"):
        return max(lateness.FRACTION * abs(median), lateness.FLOOR_MS / 1000 * pps if pps else 0.0)
    if kind == "share":
        return lateness.FRACTION * abs(median)
    return 0.0  # count, map


def judge(row: Row, kind: str | None, pps: float | None) -> Row:
    b, c = row.baseline, row.candidate
    if kind == "runs":
        # Counts of repetitions: a fault every baseline repetition recovered from and some candidate
        # repetition did not is worse; where the baseline already failed to recover in some, a candidate's
        # failures are within its spread (a yes/no over repetitions has no finer one).
        if not b.get("n") or not c.get("n"):
            row.verdict = "no value"
        elif b["ok"] == b["n"] and c["ok"] < c["n"]:
            row.verdict, row.note = "worse", f"{c['ok']} of {c['n']} repetitions, the baseline all {b['n']}"
        elif b["ok"] == 0 and c["ok"] == c["n"]:
            row.verdict = "better"
        else:
            row.verdict = "within"
        return row
    bm, cm = b.get("median"), c.get("median")
    if bm is None or cm is None:
        row.verdict = "no value"
        return row
    if row.worse == INFO:
        row.verdict = "info"
        return row
    spread = (b["max"] - b["min"]) if b.get("min") is not None and b.get("max") is not None else 0.0
    tol = spread + bound(kind, bm, pps)
    row.tolerance = _round(tol)
    if row.worse == HIGHER:
        row.limit = _round(bm + tol)
        worse, better = cm > bm + tol, cm < bm - tol
    else:
        row.limit = _round(bm - tol)
        worse, better = cm < bm - tol, cm > bm + tol
    if isinstance(tol, float) and math.isnan(tol):  # an infinite ratio on the baseline's side
        worse = better = False
    row.verdict = "worse" if worse else "better" if better else "within"
    return row


def compare(baseline: str | Path | dict, candidate: str | Path | dict | None = None,
            ignore: list[str] | tuple[str, ...] = (), variants: tuple[str, str] | None = None) -> Comparison:
    """Every figure of every variant, fault and stream both runs hold; each judged by ``judge``. ``ignore``:
    figure names or patterns (``workload.*``) reported with both sides' values but not judged.

    Two variants instead of two runs: ``variants`` (baseline's variant, candidate's variant), the candidate
    defaulting to the baseline's run (two variants of one run), or a side given as 'RUN:VARIANT'. Their
    figures are matched by fault, stream and figure, as two runs' are."""
    baseline, bvar = split_variant(baseline)
    candidate, cvar = split_variant(baseline if candidate is None else candidate)
    if variants is not None:
        if bvar or cvar:
            raise SpecError("--variants: give the variants either as RUN:VARIANT or with --variants, not both")
        bvar, cvar = variants
    if (bvar is None) != (cvar is None):
        raise SpecError(f"{'candidate' if cvar is None else 'baseline'}: give a variant on both sides "
                        f"(RUN:VARIANT), or on neither")
    base, bname = load(baseline, "baseline")
    cand, cname = load(candidate, "candidate")
    if bvar is not None:
        pick(base, bvar, "baseline")
        pick(cand, cvar, "candidate")
        bname, cname = f"{bname}:{bvar}", f"{cname}:{cvar}"
        check_pair(base, cand, list(base["variants"]))  # one experiment; the variants are the ones picked
        pairs = [(bvar, cvar)]
    else:
        check_pair(base, cand)
        pairs = [(v, v) for v in cand["variants"] if v in base["variants"]]
    bf, cf = figures(base), figures(cand)
    rows: list[Row] = []
    match_notes: list[str] = []
    for bv, cv in pairs:
        vname = bv if bv == cv else f"{bv} vs {cv}"
        err = cand["variants"][cv].get("error")
        if err:  # a variant that did not run has no figures to be within anything
            rows.append(Row(vname, "-", "-", "error", f"variants.{cv}.error", HIGHER, None, None,
                            verdict="worse", note=f"the candidate's variant failed: {err}"[:300]))
        b, c = bf[bv], cf[cv]
        bl, cl = fault_labels(base["variants"][bv]), fault_labels(cand["variants"][cv])
        if bv != cv and bl != cl and len(bl) == len(cl):  # two variants' faults: matched by place in the timeline
            as_base = dict(zip(cl, bl))
            c = {(as_base.get(f, f), st, fig): x for (f, st, fig), x in c.items()}
            match_notes += [f"the candidate's fault '{x}' is compared with the baseline's '{y}' (the same place "
                            f"in the timeline)" for x, y in zip(cl, bl) if x != y]
        order = list(b) + [k for k in c if k not in b]
        for key in order:
            fault, stream, figure = key
            worse, kind = kind_of(figure)
            x, y = b.get(key), c.get(key)
            row = Row(vname, fault, stream, figure, (x or y).key, worse, x.value if x else None,
                      y.value if y else None)
            if x is None or y is None:
                row.verdict = "candidate only" if x is None else "baseline only"
            elif any(fnmatch.fnmatchcase(figure, pat) for pat in ignore):
                row.verdict, row.note = "ignored", "not judged (--ignore)"
            else:
                judge(row, kind, x.pps)
                notes = [f"{side} flagged in {f.flagged} of {f.judged}" if f.flagged else
                         f"{side}'s fault window flagged in {f.window_flagged} of {f.judged}"
                         for side, f in (("candidate", y), ("baseline", x)) if f.flagged or f.window_flagged]
                if notes:  # the meter says the machine moved it: run again, or read it with that error bar
                    row.note = "; ".join(filter(None, [row.note, *notes, "the machine was late"]))
            rows.append(row)
    notes = ([f"not judged (--ignore): {', '.join(ignore)}"] if ignore else []) + match_notes
    for what in ("repetitions", "duration"):
        if base.get(what) != cand.get(what):
            notes.append(f"{what}: baseline {base.get(what)}, candidate {cand.get(what)}")
    for side, res in (("baseline", base), ("candidate", cand)):
        if res.get("partial"):
            notes.append(f"the {side} is partial: {res['partial']}")
    only = {side: [v for v in a["variants"] if v not in o["variants"]]
            for side, a, o in (("baseline", base, cand), ("candidate", cand, base))} if bvar is None else {}
    return Comparison(base.get("experiment", "?"), bname, cname, rows, notes, {k: v for k, v in only.items() if v})


def write_reports(cmp: Comparison, junit: str | Path | None = None, markdown: str | Path | None = None) -> None:
    if junit:
        Path(junit).write_text(cmp.junit())
    if markdown:
        Path(markdown).write_text(cmp.markdown())


# --- formatting ------------------------------------------------------------------------------------------------
def _round(x: float) -> float:
    return round(x, 3) if isinstance(x, float) and math.isfinite(x) else x


def _num(x) -> str:
    return "-" if x is None else f"{x:g}" if isinstance(x, (int, float)) else str(x)


def _mm(d: dict | None) -> str:
    if not d:
        return "-"
    if "ok" in d:
        return f"{d['ok']}/{d['n']} runs" if d.get("n") is not None else "-"
    if d.get("median") is None:
        return "-"
    if d.get("n", 0) == 1 or d.get("min") is None:
        return _num(d["median"])
    return f"{_num(d['min'])}/{_num(d['median'])}/{_num(d['max'])}"

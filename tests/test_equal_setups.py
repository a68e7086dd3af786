"""Variants compared in one shipped table are equal in connections and bytes, or the table says what each
ran: a results.json whose variants' runs report different connection counts or bytes per iteration must
state them per variant (``variants.NAME.<workload>.connections`` and ``bytes_per_iteration``, which
summary.txt's lines print). results/UNEQUAL-SETUPS.txt lists the shipped ones that do not yet (they await
a re-run); a listed one that does fails too, so the list only shrinks."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "results" / "UNEQUAL-SETUPS.txt"
KEYS = ("connections", "bytes_per_iteration")


def shipped_results() -> list[Path]:
    r = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", "results"], capture_output=True, text=True)
    if r.returncode == 0 and r.stdout:
        return sorted(ROOT / p for p in r.stdout.split("\0") if p.endswith("results.json"))
    return sorted((ROOT / "results").rglob("results.json"))


def ran(v: dict) -> dict[str, set]:
    """What a variant's runs report: {key: the distinct values}."""
    out: dict[str, set] = {k: set() for k in KEYS}
    for r in v.get("runs") or []:
        w = r.get("workload") if isinstance(r, dict) else None
        if isinstance(w, dict):
            for k in KEYS:
                if w.get(k) is not None:
                    out[k].add(json.dumps(w[k]))
    return out


def stated(v: dict) -> bool:
    """The variant carries its set-up at its top: a workload figure block naming connections and bytes."""
    return any(isinstance(x, dict) and all(k in x for k in KEYS) for x in v.values())


def unstated(doc: dict) -> list[str]:
    """What differs between the variants without the variants saying so ([] when nothing does)."""
    vs = (doc.get("variants") or {}) if isinstance(doc, dict) else {}
    runs = {n: ran(v) for n, v in vs.items() if isinstance(v, dict)}
    out = []
    for k in KEYS:
        values = {x for r in runs.values() for x in r[k]}
        if len(values) > 1:
            quiet = [n for n, v in vs.items() if runs[n][k] and not stated(v)]
            if quiet:
                out.append(f"{k} differ ({', '.join(sorted(values))}) and {len(quiet)} variant(s) do not state "
                           f"them, e.g. {quiet[0]}")
    return out


def listed() -> dict[str, str]:
    out = {}
    for line in LIST.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            path, _, reason = line.partition(" ")
            assert reason.strip(), f"{LIST.name}: {path} has no reason"
            out[path] = reason
    return out


def test_variants_compared_in_one_table_are_equal_or_say_what_they_ran():
    skip = listed()
    bad = {}
    for p in shipped_results():
        rel = str(p.relative_to(ROOT))
        if rel not in skip and (why := unstated(json.loads(p.read_text()))):
            bad[rel] = why
    assert not bad, "; ".join(f"{p}: {'; '.join(w)}" for p, w in bad.items())


def test_the_list_names_only_results_that_still_hide_a_difference():
    fine = [p for p in listed() if not (ROOT / p).exists() or not unstated(json.loads((ROOT / p).read_text()))]
    assert not fine, f"{LIST.name} lists results that are missing or state their set-ups now; remove: {', '.join(fine)}"


def _v(conns: int, nbytes: int, state: bool) -> dict:
    v = {"runs": [{"workload": {"connections": conns, "bytes_per_iteration": nbytes}}]}
    if state:
        v["allreduce"] = {"connections": conns, "bytes_per_iteration": nbytes}
    return v


def test_what_counts_as_hiding_a_difference():
    assert unstated({"variants": {"a": _v(1, 100, False), "b": _v(1, 100, False)}}) == []  # equal: nothing to say
    got = unstated({"variants": {"a": _v(4, 100, False), "b": _v(1, 100, False)}})
    assert len(got) == 1 and got[0].startswith("connections differ (1, 4)")
    assert len(unstated({"variants": {"a": _v(4, 100, False), "b": _v(1, 200, False)}})) == 2
    assert unstated({"variants": {"a": _v(4, 100, True), "b": _v(1, 200, True)}}) == []  # stated per variant
    # the new aggregate states them
    from hpnlab.traffic.workloads.allreduce import AllReduce

    runs = [{"workload": {"connections": 4, "select": "least-loaded", "placement": "disjoint", "size_bytes": 1 << 20,
                          "bytes_per_iteration": 1572864, "fabric": {}, "iteration_ms": 500.0}}]
    agg = AllReduce().aggregate(runs)["allreduce"]
    assert stated({"allreduce": agg})
    assert agg["connections"] == 4 and agg["placement"] == "disjoint" and agg["bytes_per_iteration"] == 1572864
    line = AllReduce().summary_lines("disjoint-healthy-c4", {"allreduce": {**agg, "expected_bytes": {"n": 0}}})[0]
    assert "4 connection(s) per peer" in line and "placement disjoint" in line and "1048576 B reduced" in line

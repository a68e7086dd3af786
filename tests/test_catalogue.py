"""docs/catalogue.md has one row per experiment file, each with its shipped result folder and the run time
that folder's results.json records (its figures are checked with every page's by tests/test_docs.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import ROOT

PAGE = ROOT / "docs" / "catalogue.md"


def _rows() -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in PAGE.read_text().splitlines():
        m = re.match(r"\| `([a-z0-9-]+)` \|", line)
        if m:
            assert m[1] not in rows, f"docs/catalogue.md: {m[1]} has two rows"
            rows[m[1]] = [c.strip() for c in line.strip().strip("|").split("|")]
    return rows


def recorded_minutes(results: Path) -> int | None:
    """Minutes from `started` to `finished` (summed over the merged runs' `parts`), or None if not recorded."""
    if not results.exists():
        return None
    doc = json.loads(results.read_text())
    parts = doc.get("parts")
    spans = parts if parts and all("started" in p and "finished" in p for p in parts) else [doc]
    if not all("started" in s and "finished" in s for s in spans):
        return None
    return max(1, round(sum(s["finished"] - s["started"] for s in spans) / 60))


def test_recorded_minutes(tmp_path):
    f = tmp_path / "results.json"
    f.write_text(json.dumps({"started": 0, "finished": 150}))
    assert recorded_minutes(f) == 2
    f.write_text(json.dumps({"started": 0, "finished": 1e6, "parts": [{"started": 0, "finished": 20},
                                                                    {"started": 500, "finished": 600}]}))
    assert recorded_minutes(f) == 2
    f.write_text(json.dumps({}))
    assert recorded_minutes(f) is None and recorded_minutes(tmp_path / "none.json") is None


def test_every_experiment_has_its_row():
    rows = _rows()
    files = {p.stem for p in (ROOT / "experiments").glob("*.yml")}
    assert files and set(rows) == files, f"missing: {sorted(files - set(rows))}, extra: {sorted(set(rows) - files)}"


def test_each_row_names_its_result_and_run_time():
    for name, cells in _rows().items():
        assert len(cells) == 7, f"{name}: {len(cells)} cells"
        folder = ROOT / "results" / name
        minutes = recorded_minutes(folder / "results.json")
        want = "not recorded" if minutes is None else f"{minutes} min"
        assert cells[3] == want, f"{name}: run time '{cells[3]}', its results.json records {want}"
        if folder.exists():
            assert f"../results/{name}/" in cells[4], f"{name}: the result cell does not link results/{name}"
        else:
            assert "none shipped" in cells[4], f"{name}: no results/{name}, and the row does not say so"
        assert re.match(r"(agrees|disagrees|not comparable)", cells[6]), f"{name}: verdict '{cells[6]}'"

"""Every shipped JSON under results/ says what made it: a commit, clean code (``dirty: false``), and no file
over 10 MB; except the ones results/STALE.txt lists as awaiting a clean re-run (bench/rerun_results.py
makes them so by construction). A listed file that is in fact clean fails too, so the list only shrinks."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
MANIFEST = RESULTS / "STALE.txt"
MAX_BYTES = 10 * 1024 * 1024
HEX40 = re.compile(r"[0-9a-f]{40}")


def shipped_jsons() -> list[Path]:
    """The JSON files git tracks under results/ (raw/ folders are never shipped); every one on disk outside
    a checkout."""
    r = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", "results"], capture_output=True, text=True)
    if r.returncode == 0 and r.stdout:
        return sorted(ROOT / p for p in r.stdout.split("\0") if p.endswith(".json"))
    return sorted(p for p in RESULTS.rglob("*.json") if "raw" not in p.relative_to(RESULTS).parts)


def provenance_offences(prov, where: str) -> list[str]:
    if not isinstance(prov, dict):
        return [f"{where}no provenance"]
    out = []
    commits = prov.get("commits") if prov.get("commit") == "several" else [prov.get("commit")]
    if not isinstance(commits, list) or not all(isinstance(c, str) and HEX40.fullmatch(c) for c in commits):
        out.append(f"{where}no commit (commit {prov.get('commit')!r})")
    if prov.get("dirty") is not False:
        out.append(f"{where}dirty {prov.get('dirty')!r}")
    dp = prov.get("dirty_paths")
    if isinstance(dp, list) and dp:
        out.append(f"{where}code not the commit's ({len(dp)} dirty_paths)")
    return out


def offences(path: Path) -> list[str]:
    """What keeps ``path`` from being a result made from a clean commit ([] when nothing does)."""
    out = []
    if path.stat().st_size > MAX_BYTES:
        out.append(f"{path.stat().st_size / 2**20:.1f} MB, over 10 MB")
    try:
        doc = json.loads(path.read_text())
    except ValueError as e:
        return out + [f"not JSON ({e})"]
    if isinstance(doc, list):  # one record per run (scale.json, vm-results.json): each carries its own
        bad = [o for i, x in enumerate(doc) for o in provenance_offences(
            x.get("provenance") if isinstance(x, dict) else None, f"entry {i}: ")]
        if bad:
            out.append(f"{len(bad)} entry offence(s), first: {bad[0]}")
    elif isinstance(doc, dict):
        out += provenance_offences(doc.get("provenance"), "")
    else:
        out.append("neither an object nor a list")
    return out


def manifest() -> dict[str, str]:
    """results/STALE.txt: 'PATH  REASON' a line (PATH relative to the repository; '#' starts a comment)."""
    out = {}
    for line in MANIFEST.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            path, _, reason = line.partition(" ")
            assert reason.strip(), f"results/STALE.txt: {path} has no reason"
            assert path not in out, f"results/STALE.txt lists {path} twice"
            out[path] = reason.strip()
    return out


def test_every_shipped_result_is_from_a_clean_commit_or_listed_as_stale():
    listed = manifest()
    unlisted = {str(p.relative_to(ROOT)): o for p in shipped_jsons()
                if (o := offences(p)) and str(p.relative_to(ROOT)) not in listed}
    assert not unlisted, ("results without a clean commit (re-run them with bench/rerun_results.py, or list them "
                          "in results/STALE.txt with the reason): " + "; ".join(f"{p}: {', '.join(o)}"
                                                                         for p, o in unlisted.items()))


def test_the_stale_list_only_names_stale_results():
    clean, missing = [], []
    for path in manifest():
        p = ROOT / path
        if not p.exists():
            missing.append(path)
        elif not offences(p):
            clean.append(path)
    assert not missing, f"results/STALE.txt lists files that do not exist: {', '.join(missing)}"
    assert not clean, f"results/STALE.txt lists results that are clean now; remove them from it: {', '.join(clean)}"


@pytest.mark.parametrize("prov,bad", [
    ({"commit": "a" * 40, "dirty": False, "dirty_paths": []}, []),
    ({"commit": "a" * 40, "dirty": False}, []),
    ({"commit": "several", "commits": ["a" * 40, "b" * 40], "dirty": False}, []),
    ({"commit": "several", "commits": ["a" * 40, "unknown"], "dirty": False}, ["no commit"]),
    ({"commit": "a" * 40, "dirty": True, "dirty_paths": []}, ["dirty True"]),
    ({"commit": "a" * 40, "dirty": False, "dirty_paths": ["lab/x.py"]}, ["code not the commit's"]),
    ({"commit": "unknown", "dirty": "unknown"}, ["no commit", "dirty 'unknown'"]),
    (None, ["no provenance"]),
])
def test_what_counts_as_made_from_a_clean_commit(prov, bad):
    got = provenance_offences(prov, "")
    assert len(got) == len(bad) and all(g.startswith(b) for g, b in zip(got, bad)), got


def test_size_and_list_records_are_judged(tmp_path):
    clean = {"commit": "a" * 40, "dirty": False}
    p = tmp_path / "x.json"
    p.write_text(json.dumps([{"provenance": clean}, {"rung": 2}]))
    assert offences(p) and "entry 1: no provenance" in offences(p)[0]
    p.write_text(json.dumps([{"provenance": clean}]))
    assert offences(p) == []
    p.write_text(json.dumps({"provenance": clean, "pad": "x" * (MAX_BYTES + 1)}))
    assert offences(p) == [f"{p.stat().st_size / 2**20:.1f} MB, over 10 MB"]

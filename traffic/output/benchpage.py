"""report.html for a result folder that is not one `hpnlab run`'s: a bench's (results/<name>/ with its JSON
files, summary.txt files, pictures and notes). Self-contained like the run's report (pictures inlined as
data: URIs, no script, nothing fetched): the provenance of each JSON file (which commit, clean or not, when),
each summary.txt, each picture, the result's NOTES.md, and every JSON file as a tree a reader opens level by
level. An experiment's folder gets the interactive report instead (hpnlab.traffic.output.htmlreport)."""

from __future__ import annotations

import base64
import json
import time
from html import escape
from pathlib import Path
from typing import Any

from hpnlab.errors import SpecError

NAME = "report.html"
PICTURE_LIMIT = 2_000_000  # bytes: a larger picture is linked, not inlined
LEAF_LIMIT = 400  # a JSON list longer than this shows its first items and says how many it left out

CSS = """body{font-family:sans-serif;margin:24px auto;max-width:1200px;color:#222;padding:0 16px}
h1{font-size:22px}h2{font-size:17px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:28px}
pre{background:#f6f6f6;border:1px solid #ddd;padding:10px;overflow-x:auto;font-size:12.5px;line-height:1.35}
table.prov{border-collapse:collapse;font-size:13px}table.prov td,table.prov th{border:1px solid #ddd;
padding:3px 8px;text-align:left;vertical-align:top}.dirty{color:#b00;font-weight:bold}.clean{color:#070}
details{margin-left:16px;font-family:monospace;font-size:12.5px}summary{cursor:pointer}
.leaf{margin-left:32px;font-family:monospace;font-size:12.5px}.k{color:#555}img{max-width:100%;border:1px solid #ddd}
.note{color:#666;font-size:13px}"""


def _when(ts: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts)) if isinstance(ts, (int, float)) else "-"


def _provenance(doc: Any) -> dict | None:
    """The provenance a bench's JSON records (at its top, or under 'provenance')."""
    if not isinstance(doc, dict):
        return None
    pv = doc.get("provenance") if isinstance(doc.get("provenance"), dict) else doc
    return pv if "commit" in pv else None


def _tree(key: str, value: Any, depth: int = 0) -> str:
    """A JSON value as nested <details>: the top level open, every deeper level closed until clicked."""
    label = f'<span class="k">{escape(key)}</span>'
    if isinstance(value, dict):
        inner = "".join(_tree(k, v, depth + 1) for k, v in value.items())
        return f"<details{' open' if depth == 0 else ''}><summary>{label} {{{len(value)}}}</summary>{inner}</details>"
    if isinstance(value, list):
        shown = value[:LEAF_LIMIT]
        inner = "".join(_tree(str(i), v, depth + 1) for i, v in enumerate(shown))
        if len(value) > len(shown):
            inner += f'<div class="leaf note">... {len(value) - len(shown)} more items (in the file)</div>'
        return f"<details><summary>{label} [{len(value)}]</summary>{inner}</details>"
    return f'<div class="leaf">{label}: {escape(json.dumps(value))}</div>'


def collect(folder: Path) -> dict:
    """What the page shows, found in ``folder`` and its sub-folders (paths relative to it)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != NAME)
    out: dict = {"json": [], "summaries": [], "pictures": [], "notes": None}
    for p in files:
        rel = p.relative_to(folder).as_posix()
        if p.suffix == ".json":
            try:
                doc = json.loads(p.read_text())
            except ValueError as e:
                raise SpecError(f"report: '{p}' is not JSON ({e}); fix or remove it") from None
            out["json"].append((rel, doc))
        elif p.name == "summary.txt":
            out["summaries"].append((rel, p.read_text()))
        elif p.suffix == ".png":
            out["pictures"].append((rel, p))
        elif p.name == "NOTES.md" and p.parent == folder:
            out["notes"] = p.read_text()
    if not out["json"] and not out["summaries"]:
        raise SpecError(f"report: '{folder}' holds no results (no results.json, no JSON or summary.txt); give the "
                        f"folder of an 'hpnlab run' or of a bench's results")
    return out


def render(folder: Path) -> str:
    found = collect(folder)
    name = folder.resolve().name
    body = [f"<h1>hpnlab result: {escape(name)}</h1>",
            '<p class="note">A bench\'s result folder: its files\' provenance, summaries, pictures and notes, and every '
            "JSON file to open level by level. Made by <code>hpnlab report</code>; it opens offline.</p>",
            "<h2>Provenance</h2>", '<table class="prov"><tr><th>file</th><th>commit</th><th>code</th>'
            "<th>started</th><th>kernel</th><th>cores</th></tr>"]
    for rel, doc in found["json"]:
        pv = _provenance(doc)
        if pv is None:
            body.append(f"<tr><td>{escape(rel)}</td><td colspan=5 class=dirty>no provenance recorded</td></tr>")
            continue
        dirty = pv.get("dirty")
        code = ('<span class="clean">clean</span>' if dirty is False else
                f'<span class="dirty">dirty {escape(", ".join(pv.get("dirty_paths") or []))}</span>')
        started = doc.get("started") if isinstance(doc, dict) else None
        body.append(f"<tr><td>{escape(rel)}</td><td>{escape(str(pv.get('commit')))}</td><td>{code}</td>"
                    f"<td>{_when(started)}</td><td>{escape(str(pv.get('kernel', '-')))}</td>"
                    f"<td>{escape(str(pv.get('cores', '-')))}</td></tr>")
    body.append("</table>")
    for rel, text in found["summaries"]:
        body += [f"<h2>{escape(rel)}</h2>", f"<pre>{escape(text)}</pre>"]
    for rel, path in found["pictures"]:
        data = path.read_bytes()
        if len(data) > PICTURE_LIMIT:
            body += [f"<h2>{escape(rel)}</h2>", f'<p><a href="{escape(rel)}">{escape(rel)}</a> '
                     f"({len(data) / 1e6:.1f} MB, beside this page)</p>"]
        else:
            uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
            body += [f"<h2>{escape(rel)}</h2>", f'<img alt="{escape(rel)}" src="{uri}">']
    if found["notes"]:
        body += ["<h2>NOTES.md</h2>", f"<pre>{escape(found['notes'])}</pre>"]
    body.append("<h2>The files</h2>")
    body += [_tree(rel, doc) for rel, doc in found["json"]]
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>hpnlab {escape(name)}</title>'
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write(folder: Path) -> Path:
    """FOLDER/report.html for a bench's result folder."""
    page = render(folder)
    tmp = folder / (NAME + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(folder / NAME)
    return folder / NAME

"""Figure tables written from the shipped results, so a page's table of figures cannot drift from its files.

A page (README.md, docs/*.md) holds a generated block between two markers::

    <!-- figures: t (made by python -m hpnlab.docgen docs from docs/figures/t.yml; edit that file) -->
    | quantity | figure | source |
    ...
    <!-- end figures -->

docs/figures/t.yml describes the table::

    files:                      # an alias per results file (paths from the repository's root)
      lf: results/link-failure/results.json
    columns: [quantity, figure, source]
    rows:
      - ["access link failure", "{lf:variants.dual-tor-clos.faults.0.converged_gap_ms.median:1} ms", "{files}"]
      - cells: ["...", "{lf:some.key.min} flows, in every repetition", "{files}"]
        agree: true             # the row's lone min/median/max are the same in every repetition (checked)

A placeholder ``{ALIAS:KEY}`` is the file's number at KEY (dots, list indices as numbers), optionally scaled
(``*F`` or ``/F`` after the key, as a figure tag's title allows) and rounded to a number of decimals (``:P`` at the
end; without it the number is printed as the file holds it). ``{files}`` is a link to each file the row's
placeholders read, relative to the page: every figure says which file it comes from. A number printed here is one
that a figure tag would accept (`shows`).

Like a median tag, a ``.median`` placeholder comes with the same key's ``.min`` and ``.max`` in its row, so a
repetition that stalled cannot hide behind it, unless the row says ``agree: true`` and the file's min and max are
indeed the same as printed; a row that says "in every repetition" must say ``agree: true``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

FIGURES_DIR = "docs/figures"
BLOCK = re.compile(r"^<!-- figures: (?P<name>[^\s]+)[^\n]*-->\n(?P<body>.*?)^<!-- end figures -->$", re.S | re.M)
PLACEHOLDER = re.compile(r"\{(?P<alias>[a-z0-9-]+):(?P<key>[^{}\s*/:]+)(?:(?P<op>[*/])(?P<by>[0-9.]+))?"
                         r"(?::(?P<places>[0-9]))?\}")
# Words that present a figure as one of several that differed (as a figure tag's check reads them).
SPREAD_WORDS = re.compile(r"median|min[/–-]|–max|range|spread", re.I)
SAME_WORDS = re.compile(r"in (?:every|each) repetition|in all [0-9]|every run")  # as a figure tag's check reads them


class FigureTableError(ValueError):
    """A figure table that cannot be written: one line naming the YAML file, the row and what is wrong."""


@dataclass(frozen=True)
class Figure:
    """One number a generated table prints: its file (from the repository's root), key, scale and the text."""
    file: str
    key: str
    op: str | None
    by: str | None
    num: str


def resolve(doc, key: str):
    """The value at a dotted key (a list's items by number)."""
    for part in key.split("."):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def scaled(value: float, op: str | None, by: str | None) -> float:
    if not op:
        return value
    return value * float(by) if op == "*" else value / float(by)


def shows(value: float, shown: str) -> bool:
    """Whether the text shown (1,234.5) is the value, rounded to as many decimals as shown: the rule a figure tag is
    checked by, and the one every generated number is made to meet."""
    shown = shown.replace(",", "")
    places = len(shown.split(".")[1]) if "." in shown else 0
    return round(value, places) == float(shown)


def number(value: float, places: int | None) -> str:
    """value as printed: to places decimals, or as the file holds it (an integral value without '.0')."""
    if places is not None:
        text = f"{value:.{places}f}"
    elif isinstance(value, int) or float(value).is_integer():
        text = str(int(value))
    else:
        text = repr(float(value))
    if text.startswith("-") and float(text) == 0:
        text = text[1:]
    assert shows(value, text), (value, text)
    return text


def _link(file: str, page: Path, root: Path) -> str:
    rel = Path(*[".."] * len(page.resolve().parent.relative_to(root.resolve()).parts), file).as_posix()
    return f"[{file}]({rel})"


def _rows(spec: dict, where: str) -> list[tuple[list, bool]]:
    out = []
    for i, row in enumerate(spec.get("rows") or [], 1):
        if isinstance(row, dict):
            unknown = set(row) - {"cells", "agree"}
            if unknown:
                raise FigureTableError(f"{where}: row {i}: unknown key {sorted(unknown)[0]!r} (a row has cells, agree)")
            cells, agree = row.get("cells"), bool(row.get("agree", False))
        else:
            cells, agree = row, False
        if not isinstance(cells, list):
            raise FigureTableError(f"{where}: row {i}: cells must be a list of texts")
        out.append(([str(c) for c in cells], agree))
    return out


def render(name: str, page: Path, root: Path, loaded: dict | None = None) -> tuple[str, list[Figure]]:
    """The table docs/figures/<name>.yml describes, as the Markdown of page, and the figures it prints."""
    loaded = loaded if loaded is not None else {}
    path = root / FIGURES_DIR / f"{name}.yml"
    where = f"{FIGURES_DIR}/{name}.yml"
    if not path.is_file():
        raise FigureTableError(f"{page.name}: the figures block '{name}' has no {where} (write it, or remove "
                               f"the block)")
    try:
        spec = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise FigureTableError(f"{where}: not YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(spec, dict) or set(spec) - {"files", "columns", "rows"}:
        raise FigureTableError(f"{where}: the keys are files, columns and rows")
    files, columns = spec.get("files") or {}, spec.get("columns") or []
    if not columns:
        raise FigureTableError(f"{where}: columns: the table's headings, a list")
    lines = ["| " + " | ".join(map(str, columns)) + " |", "|" + "---|" * len(columns)]
    figures: list[Figure] = []
    for i, (cells, agree) in enumerate(_rows(spec, where), 1):
        at = f"{where}: row {i}"
        if len(cells) != len(columns):
            raise FigureTableError(f"{at}: {len(cells)} cells for {len(columns)} columns")
        found = [(c, m) for c, cell in enumerate(cells) for m in PLACEHOLDER.finditer(cell)]
        keys = {(m["alias"], m["key"]) for _, m in found}
        values: dict[tuple, float] = {}
        for _, m in found:
            alias, key = m["alias"], m["key"]
            if alias not in files:
                raise FigureTableError(f"{at}: {{{alias}:...}} names no file (files: {', '.join(files) or 'none'})")
            file = str(files[alias])
            if file not in loaded:
                try:
                    loaded[file] = json.loads((root / file).read_text())
                except (OSError, ValueError) as e:
                    raise FigureTableError(f"{at}: {file} cannot be read ({e.__class__.__name__})") from None
            try:
                value = resolve(loaded[file], key)
            except (KeyError, IndexError, ValueError, TypeError):
                raise FigureTableError(f"{at}: {file} has no key {key}") from None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise FigureTableError(f"{at}: {file}:{key} is not a number ({value!r})")
            values[(alias, key)] = value
        for c, m in found:  # every repetition visible, as for a median tag
            base, _, stat = m["key"].rpartition(".")
            if stat not in ("min", "median", "max"):
                continue
            if all((m["alias"], f"{base}.{s}") in keys for s in ("min", "max")):
                continue  # the range is shown
            if stat != "median" and not agree:
                continue  # one bound, shown as such
            if not agree:
                raise FigureTableError(f"{at}: {m['key']} without its .min and .max (quote them in the row, or say "
                                       f"agree: true if the repetitions gave the same figure)")
            try:
                lo, hi = (resolve(loaded[str(files[m["alias"]])], f"{base}.{s}") for s in ("min", "max"))
            except (KeyError, IndexError, ValueError, TypeError):
                raise FigureTableError(f"{at}: agree: true, but {files[m['alias']]} has no {base}.min and "
                                       f".max") from None
            p = int(m["places"]) if m["places"] else None
            if number(scaled(lo, m["op"], m["by"]), p) != number(scaled(hi, m["op"], m["by"]), p):
                raise FigureTableError(f"{at}: agree: true, but the repetitions gave {base} {lo}..{hi}")
            after = re.split(r"\{|\.\s|;", cells[c][m.end():])[0]
            if SPREAD_WORDS.search(after):
                raise FigureTableError(f"{at}: {m['key']} is the same in every repetition, but is presented as one of "
                                       f"several that differed ({after.strip()[:40]!r})")
        if SAME_WORDS.search(" ".join(cells)) and not agree:
            raise FigureTableError(f"{at}: says 'in every repetition' but not agree: true")
        used = sorted({str(files[m["alias"]]) for _, m in found})

        def fill(m: re.Match) -> str:
            value = scaled(values[(m["alias"], m["key"])], m["op"], m["by"])
            text = number(value, int(m["places"]) if m["places"] else None)
            figures.append(Figure(str(files[m["alias"]]), m["key"], m["op"], m["by"], text))
            return text

        out = []
        for cell in cells:
            cell = PLACEHOLDER.sub(fill, cell)
            cell = cell.replace("{files}", ", ".join(_link(f, page, root) for f in used))
            stray = re.search(r"\{[^}]*\}?", cell)
            if stray:
                raise FigureTableError(f"{at}: {stray.group()!r} is not a placeholder ({{ALIAS:KEY}}, {{ALIAS:KEY:P}}, "
                                       f"{{ALIAS:KEY*F:P}} or {{files}})")
            out.append(cell.replace("\n", " ").strip())
        lines.append("| " + " | ".join(out) + " |")
    return "\n".join(lines) + "\n", figures


def marker(name: str) -> str:
    return (f"<!-- figures: {name} (made by python -m hpnlab.docgen docs from {FIGURES_DIR}/{name}.yml; "
            f"edit that file) -->")


def regenerate(text: str, page: Path, root: Path, loaded: dict | None = None) -> tuple[str, list[Figure]]:
    """text with every figures block written anew from its YAML and the results, and the figures they print."""
    loaded = loaded if loaded is not None else {}
    figures: list[Figure] = []

    def one(m: re.Match) -> str:
        table, figs = render(m["name"], page, root, loaded)
        figures.extend(figs)
        return f"{marker(m['name'])}\n{table}<!-- end figures -->"

    out = BLOCK.sub(one, text)
    opened = len(re.findall(r"^<!-- figures: ", text, re.M))
    if opened != len(BLOCK.findall(text)):
        raise FigureTableError(f"{page.name}: a '<!-- figures: NAME ...-->' line without its '<!-- end figures -->'")
    return out, figures


def drifted(text: str, page: Path, root: Path, loaded: dict | None = None) -> list[str]:
    """The names of the figures blocks in text that differ from what their YAML and files make."""
    loaded = loaded if loaded is not None else {}
    bad = []
    for m in BLOCK.finditer(text):
        table, _ = render(m["name"], page, root, loaded)
        if m.group() != f"{marker(m['name'])}\n{table}<!-- end figures -->":
            bad.append(m["name"])
    return bad


def pages(docs: Path) -> list[Path]:
    """The pages that may hold figures blocks: the checkout's README.md and every page in docs/."""
    return [p for p in (docs.parent / "README.md", *sorted(docs.glob("*.md"))) if p.is_file()]


def write_all(docs: Path) -> list[Path]:
    """Regenerate every figures block in every page in place (docs is the checkout's docs/, its YAML under
    docs/figures/); the pages that changed."""
    root, loaded = docs.resolve().parent, {}
    texts = {page: page.read_text() for page in pages(docs)}
    new = {page: regenerate(text, page, root, loaded)[0] for page, text in texts.items()}  # all, before writing one
    changed = [page for page in texts if new[page] != texts[page]]
    for page in changed:
        page.write_text(new[page])
    return changed

"""How summary.txt lays its text out so it fits a terminal: at most WIDTH columns, tables that fold when wider,
prose wrapped, and the legend of every column or figure name at its end. Text only: the failover summary
(hpnlab.traffic.output.report) and the workloads' own tables both use it, and it imports nothing of theirs."""

from __future__ import annotations

WIDTH = 100  # summary.txt fits a terminal: no line longer than this (a table wider than it goes on in another)


def block(columns: list[tuple[str, dict[str, str]]], rows: list[str]) -> list[str]:
    """Figures down, streams across; streams that do not fit in WIDTH go on in another table below."""
    label = max(len(r) for r in rows) + 2
    out: list[str] = []
    chunk: list[tuple[str, dict[str, str], int]] = []
    used = label

    def flush():
        if not chunk:
            return
        out.append((" " * label + "  ".join(h.ljust(w) for h, _c, w in chunk)).rstrip())
        for r in rows:
            if any(c.get(r, "") for _h, c, _w in chunk):
                out.append((r.ljust(label) + "  ".join(c.get(r, "").ljust(w) for _h, c, w in chunk)).rstrip())

    for head, cells in columns:
        w = max(len(head), *(len(v) for v in cells.values()))
        if chunk and used + w + 2 > WIDTH:
            flush()
            chunk, used = [], label
        chunk.append((head, cells, w))
        used += w + 2
    flush()
    return out


def wrap(lines: list[str], indent: int | None = None) -> list[str]:
    """Prose lines folded to WIDTH (continuations indented two past the line's own indent, or by ``indent``),
    so summary.txt fits a terminal."""
    import textwrap

    out = []
    for ln in lines:
        if len(ln) <= WIDTH:
            out.append(ln)
            continue
        lead = len(ln) - len(ln.lstrip())
        out += textwrap.wrap(ln, WIDTH, initial_indent="",
                             subsequent_indent=" " * (lead + 2 if indent is None else indent),
                             break_long_words=False, break_on_hyphens=False)
    return out


LEGEND_HEAD = "legend"  # the line that opens summary.txt's legend: "legend (PAGE says more):"



def table(rows: list[tuple], fold: bool = True) -> list[str]:
    """Rows as left-aligned columns (the first row their headers), a line per row; where that is wider than
    WIDTH (and ``fold``), the columns go down instead (a column per row, titled by its first cell), in as
    many tables as it takes."""
    w = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    if not fold or max(len(ln) for ln in lines) <= WIDTH:
        return lines
    names = [str(h) for h in rows[0][1:]]
    return block([(str(r[0]), dict(zip(names, map(str, r[1:])))) for r in rows[1:]], names)


def legend_lines(headers: list[str], legend: dict[str, str], page: str = "docs/results.md") -> list[str]:
    """The one-line legend of every column or figure name in ``headers`` (each in ``legend``), for the end of
    summary.txt; a line that would pass WIDTH goes on indented under its text."""
    w = max(len(h) for h in headers) + 2
    out = ["", f"{LEGEND_HEAD} ({page} says more):"]
    for h in headers:
        out += wrap([f"  {(h + ':').ljust(w)}{legend[h]}"], indent=2 + w)
    return out

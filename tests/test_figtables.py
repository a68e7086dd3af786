"""Figure tables written from results files (hpnlab.docgen.figtables): the numbers are the files', rounded as a figure
tag's are checked; a stale block, a missing key, a block without its YAML and a median without its repetitions'
spread are each caught with one line naming the YAML file and the row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpnlab import docgen
from hpnlab.docgen import figtables
from hpnlab.docgen.figtables import FigureTableError

RESULT = {"v": {"gap_ms": {"n": 3, "min": 125.52, "median": 125.94, "max": 127.9},
                "lost": {"n": 3, "min": 0, "median": 0, "max": 0}, "flows": 32, "share": 0.2}}
GAP = "{r:v.gap_ms.min:1}–{r:v.gap_ms.max:1} ms, median {r:v.gap_ms.median:1}"


def _root(tmp_path: Path, rows: list, columns=("what", "figure", "source")) -> Path:
    (tmp_path / "results" / "x").mkdir(parents=True)
    (tmp_path / "results" / "x" / "results.json").write_text(json.dumps(RESULT))
    (tmp_path / "docs" / "figures").mkdir(parents=True)
    spec = {"files": {"r": "results/x/results.json"}, "columns": list(columns), "rows": rows}
    (tmp_path / "docs" / "figures" / "t.yml").write_text(json.dumps(spec))  # JSON is YAML
    return tmp_path


def _page(root: Path, name: str = "README.md") -> tuple[Path, str]:
    page = root / name
    text = f"# P\n\n{figtables.marker('t')}\n<!-- end figures -->\n\nprose\n"
    page.write_text(text)
    return page, text


def test_a_block_is_written_from_the_files(tmp_path):
    root = _root(tmp_path, [["gap", GAP, "{files}"],
                            {"cells": ["lost", "{r:v.lost.median} packets, in every repetition", "{files}"],
                             "agree": True},
                            ["share", "{r:v.share*100:0} % of {r:v.flows}", "{files} (x)"]])
    page, text = _page(root)
    new, figs = figtables.regenerate(text, page, root)
    assert "| gap | 125.5–127.9 ms, median 125.9 | [results/x/results.json](results/x/results.json) |" in new
    assert "| lost | 0 packets, in every repetition |" in new
    assert "| share | 20 % of 32 | [results/x/results.json](results/x/results.json) (x) |" in new
    assert new.startswith("# P\n\n<!-- figures: t (made by") and new.endswith("<!-- end figures -->\n\nprose\n")
    assert ("results/x/results.json", "v.gap_ms.median", None, None, "125.9") in \
        [(f.file, f.key, f.op, f.by, f.num) for f in figs]
    assert all(figtables.shows(figtables.scaled(figtables.resolve(RESULT, f.key), f.op, f.by), f.num) for f in figs)
    assert figtables.regenerate(new, page, root)[0] == new and not figtables.drifted(new, page, root)
    # from a page in docs/ the link goes up to the file
    docs_page = root / "docs" / "p.md"
    assert "[results/x/results.json](../results/x/results.json)" in figtables.regenerate(text, docs_page, root)[0]


def test_a_wrong_number_in_a_block_is_found(tmp_path):
    root = _root(tmp_path, [["gap", GAP, "{files}"]])
    page, text = _page(root)
    good = figtables.regenerate(text, page, root)[0]
    assert figtables.drifted(good, page, root) == []
    assert figtables.drifted(good.replace("127.9", "127.8"), page, root) == ["t"]
    assert figtables.drifted(text, page, root) == ["t"]  # an empty block is stale too
    figtables.write_all(root / "docs")  # what `python -m hpnlab.docgen docs` does to every page
    assert page.read_text() == good


def test_the_numbers_are_rounded_as_a_tag_is_checked():
    assert figtables.number(2.4, 2) == "2.40" and figtables.number(125.94, 1) == "125.9"
    assert figtables.number(3, None) == "3" and figtables.number(0.0, None) == "0"
    assert figtables.number(-0.04, 1) == "0.0" and figtables.number(0.1234, None) == "0.1234"
    assert figtables.shows(125.94, "125.9") and not figtables.shows(125.94, "126.0")
    assert figtables.shows(1234.5, "1,234.5") and figtables.shows(1234.5, "1234")


@pytest.mark.parametrize("rows,says", [
    ([["gap", "{r:v.gap_ms.nope:1}", "{files}"]], "docs/figures/t.yml: row 1: results/x/results.json has no key "
                                                  "v.gap_ms.nope"),
    ([["a", "b", "c"], ["gap", "{q:v.gap_ms.min}", ""]], "docs/figures/t.yml: row 2: {q:...} names no file"),
    ([["gap", "{r:v}", ""]], "row 1: results/x/results.json:v is not a number"),
    ([["gap", "{r:v.gap_ms.median:1} ms", ""]], "row 1: v.gap_ms.median without its .min and .max"),
    ([["gap", "{r:v.gap_ms.median:1} and {r:v.gap_ms.max:1} ms", ""]], "without its .min and .max"),
    ([{"cells": ["gap", "{r:v.gap_ms.median:1} ms", ""], "agree": True}], "agree: true, but the repetitions gave"),
    ([["lost", "{r:v.lost.min}, in every repetition", ""]], "row 1: says 'in every repetition' but not agree"),
    ([["gap", "{r:v.gap_ms.min} {x}", ""]], "row 1: '{x}' is not a placeholder"),
    ([["gap", "1"]], "row 1: 2 cells for 3 columns"),
    ([{"cells": ["a", "b", "c"], "agre": True}], "row 1: unknown key 'agre'"),
])
def test_a_bad_table_is_one_line_naming_the_file_and_row(tmp_path, rows, says):
    root = _root(tmp_path, rows)
    page, text = _page(root)
    with pytest.raises(FigureTableError) as e:
        figtables.regenerate(text, page, root)
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_median_beside_its_spread_or_agreeing_repetitions_passes(tmp_path):
    root = _root(tmp_path, [["gap", GAP, ""],
                            {"cells": ["lost", "{r:v.lost.median} packets in all 3", ""], "agree": True}])
    page, text = _page(root)
    assert "| lost | 0 packets in all 3 |" in figtables.regenerate(text, page, root)[0]


def test_a_figure_every_repetition_gave_is_not_presented_as_a_median(tmp_path):
    root = _root(tmp_path, [{"cells": ["lost", "{r:v.lost.median} (median of 3)", ""], "agree": True}])
    page, text = _page(root)
    with pytest.raises(FigureTableError, match="row 1: v.lost.median is the same in every repetition, but"):
        figtables.regenerate(text, page, root)


def test_a_block_without_its_yaml_or_its_end_fails(tmp_path):
    root = _root(tmp_path, [])
    page = root / "README.md"
    with pytest.raises(FigureTableError, match=r"README.md: the figures block 'gone' has no docs/figures/gone.yml"):
        figtables.regenerate(f"{figtables.marker('gone')}\n<!-- end figures -->\n", page, root)
    with pytest.raises(FigureTableError, match="without its '<!-- end figures -->'"):
        figtables.regenerate(f"{figtables.marker('t')}\n| a |\n", page, root)


def test_docgen_says_what_is_wrong_and_exits_2(tmp_path, capsys):
    root = _root(tmp_path, [["gap", "{r:v.gap_ms.nope}", ""]])
    page, text = _page(root)
    assert docgen.main([str(root / "docs")]) == 2
    assert page.read_text() == text  # the page is left as it was
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "hpnlab.docgen: docs/figures/t.yml: row 1: results/x/results.json has no key v.gap_ms.nope"

"""The docs say what the code does: the generated references match the models and the parser (drift
fails here: regenerate with `python -m hpnlab.docgen docs`), every command and flag the README and docs
show exists, every API name they use imports, every link points at a file, summary.txt's columns are
all explained, and the README's first screen stays a screen."""

from __future__ import annotations

import argparse
import bisect
import importlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from hpnlab import docgen
from hpnlab.docgen import figtables
from hpnlab.cli import build_parser
from tests.conftest import ROOT

DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
# The record behind the reference pages: each result's notes (how it was made, what was tried, superseded runs)
# and docs/notes/. Their figures are checked like the pages'; they may hold history, the pages may not.
NOTES = [*sorted(DOCS.glob("notes/*.md")), *sorted(ROOT.glob("results/*/NOTES.md"))]


@pytest.mark.parametrize("name", sorted(docgen.PAGES))
def test_generated_references_match_the_code(name):
    have = (DOCS / name).read_text() if (DOCS / name).exists() else ""
    assert have == docgen.PAGES[name](), f"docs/{name} drifted from the code: python -m hpnlab.docgen docs"


FIGURE_PAGES = [p for p in PAGES if figtables.BLOCK.search(p.read_text())]


def test_the_figure_tables_are_generated():
    assert {p.name for p in FIGURE_PAGES} >= {"README.md", "catalogue.md"}


@pytest.mark.parametrize("page", FIGURE_PAGES, ids=[p.name for p in FIGURE_PAGES])
def test_generated_figure_tables_match_the_results(page):
    """A figures block is what its docs/figures YAML makes of the shipped results (hpnlab.docgen.figtables)."""
    stale = figtables.drifted(page.read_text(), page, ROOT)
    assert not stale, f"{_name(page)}: the figures {stale} differ from their YAML and results: " \
                      f"python -m hpnlab.docgen docs"


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def _command_lines(text: str) -> list[str]:
    """Every `hpnlab ...` invocation shown in code blocks and inline code."""
    out = []
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    inline = re.findall(r"`([^`\n]*hpnlab [^`\n]*)`", text)
    for chunk in blocks + inline:
        for line in chunk.splitlines():
            if line.startswith(("bootstrap:", "[", "hpnlab: ")):  # a command's output, not a command
                continue
            for part in re.split(r"&&|\|\||;|\|", line.split(" #")[0]):
                m = re.search(r"(?:^|\s|/)hpnlab\s+([a-z].*)", part)
                if m and not part.strip().startswith(("$ sudo ./bootstrap", "python -m tests")):
                    out.append(m.group(1).strip())
    return out


CASES = [(p.name, c) for p in PAGES if p.name != "cli.md" for c in _command_lines(p.read_text())]


def test_the_docs_show_commands():
    assert len(CASES) > 25, len(CASES)


@pytest.mark.parametrize("page,command", CASES, ids=[f"{p}: {c[:50]}" for p, c in CASES])
def test_every_documented_command_and_flag_exists(page, command):
    try:
        words = shlex.split(command.replace("\\|", "|"))
    except ValueError:
        words = command.split()
    parser = build_parser()
    subs = _subparsers(parser)
    first = words[0]
    if first.startswith("-"):
        assert first in ("--version", "--help", "-h"), (page, command)
        return
    assert first in subs, f"{page}: 'hpnlab {first}' is not a command ({command})"
    p = subs[first]
    rest = words[1:]
    nested = _subparsers(p)
    if nested and rest and not rest[0].startswith("-") and rest[0] in nested:
        p = nested[rest[0]]
        rest = rest[1:]
    flags = {o for a in p._actions for o in a.option_strings}
    for w in rest:
        if w == "--":
            break
        if w.startswith("--"):
            flag = w.split("=")[0].rstrip(".,)")
            if re.fullmatch(r"--[a-z][a-z0-9-]*", flag):
                assert flag in flags, f"{page}: 'hpnlab {first}' has no {flag} ({command})"


def test_every_api_name_the_docs_use_exists():
    names = set()
    for p in PAGES:
        names |= set(re.findall(r"\bhpnlab(?:\.[A-Za-z_][A-Za-z0-9_]*)+", p.read_text()))
    assert names
    for dotted in sorted(names):
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                assert hasattr(obj, attr), f"{dotted}: no '{attr}'"
                obj = getattr(obj, attr)
            break
        else:
            raise AssertionError(f"{dotted} does not import")
    from hpnlab.api import Lab

    api = (DOCS / "api.md").read_text()
    for method in set(re.findall(r"\blab\.([a-z_]+)\(", api)):
        assert hasattr(Lab, method), f"docs/api.md uses lab.{method}(), which Lab does not have"


def test_every_link_points_at_a_file():
    for p in PAGES + NOTES:
        for target in re.findall(r"\]\(([^)#\s]+)", p.read_text()):
            if "://" in target:
                continue
            assert (p.parent / target).exists(), f"{p.name}: link to {target}, which does not exist"


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercase, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_anchors(page: Path) -> list[str]:
    """Each link from page to a heading (file.md#anchor, or #anchor in the page) that the file does not have."""
    bad = []
    for m in re.finditer(r"\]\(([^)\s#]*)#([^)\s]+)\)", page.read_text()):
        target = (page.parent / m[1]).resolve() if m[1] else page
        if target.suffix != ".md" or not target.is_file():
            continue
        text = re.sub(r"```.*?```", "", target.read_text(), flags=re.S)
        heads = {_slug(re.sub(r"^#+ ", "", line)) for line in text.splitlines() if re.match(r"#{1,6} ", line)}
        if m[2] not in heads:
            bad.append(f"{_name(page) if page.is_relative_to(ROOT) else page.name}: {m[1]}#{m[2]}")
    return bad


def test_every_link_to_a_heading_finds_it(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("## The experiment (`x.yml`, §4)\n\n[a](#the-experiment-xyml-4) [b](#gone)\n")
    assert broken_anchors(page) == ["p.md: #gone"]
    bad = [b for p in PAGES + NOTES for b in broken_anchors(p)]
    assert not bad, "links to headings that are not there (a section moved or was renamed):\n" + "\n".join(bad)


def test_summary_columns_are_all_explained():
    from hpnlab.traffic.output.report import COLUMNS

    legend = (DOCS / "results.md").read_text()
    for header, key in COLUMNS:
        assert f"| {header} |" in legend, f"docs/results.md does not explain summary.txt's '{header}'"
        if key:
            assert f"`{key}`" in legend, f"docs/results.md does not name results.json's {key}"


def test_the_readme_first_screen_is_a_screen():
    text = (ROOT / "README.md").read_text()
    first = text[:text.index("\n## ", text.index("## Quick start") + 1)]
    assert len(first.splitlines()) <= 50, len(first.splitlines())
    assert "docs/fabric.svg" in first and "./bootstrap up" in first and "./bootstrap test" in first


def test_every_file_the_docs_name_exists():
    for p in PAGES:
        for ref in re.findall(r"`((?:lab|traffic|tests|bench|vm|docker|templates|experiments|examples|results)/"
                              r"[A-Za-z0-9_./-]+)`", p.read_text()):
            if "<" in ref or "*" in ref:
                continue
            assert (ROOT / ref).exists(), f"{p.name} names {ref}, which does not exist"


# A figure the docs quote from a shipped result names the file and the key it comes from, so this test reads the
# figure there. The reference style: the figure in the text as a Markdown reference link, its source in a
# definition at the end of the section (the path is relative to the page, the title is the JSON key, which may end
# in *100 or /1000 to scale):
#     The Clos fabric routes around it in [125.9][lf-gap] ms.
#     [lf-gap]: ../results/link-failure/results.json "variants.dual-tor-clos.faults.0.converged_gap_ms.median"
# The number shown must be the file's, as rounded where shown. The older inline tag, an HTML comment before the
# figure, is refused: in the raw Markdown it drowned the prose.
INLINE_TAG = re.compile(r"<!--fig\b")
NUMBER = r"[-+]?[0-9]+(?:,[0-9]{3})*(?:\.[0-9]+)?"  # a figure as shown: 1,234.5
REF = re.compile(r"\[(?P<text>[^\[\]\n]*)\]\[(?P<id>[^\[\]\n]*)\]")
DEF = re.compile(r'^\[(?P<id>[^\]\n]+)\]:[ \t]+(?P<path>\S+)(?:[ \t]+"(?P<title>[^"\n]*)")?[ \t]*$', re.M)
KEY = re.compile(r"(?P<key>[^\s*/]+)(?:(?P<op>[*/])(?P<by>[0-9.]+))?")
FIG_ID = re.compile(r"[a-z0-9-]+")


@dataclass(frozen=True)
class Figure:
    """One figure a page quotes: its file (from the repository's root), key, scale, the number as shown, and where
    in the page it stands (start, end of the figure's text: the tag and number, or the reference link)."""
    file: str
    key: str
    op: str | None
    by: str | None
    num: str
    start: int
    end: int

    def scaled(self, value: float) -> float:
        if not self.op:
            return value
        return value * float(self.by) if self.op == "*" else value / float(self.by)


def _blank(text: str, pattern: str, flags: int = 0) -> str:
    """text with every match of pattern turned to spaces (line breaks kept): offsets and lines stay the same."""
    return re.sub(pattern, lambda m: re.sub(r"[^\n]", " ", m.group()), text, flags=flags)


def _without_code(text: str) -> str:
    return _blank(text, r"```.*?```", re.S)  # an example in a code block is not a figure


def _headings(text: str) -> list[int]:
    return [m.start() for m in re.finditer(r"^#{1,6} ", text, flags=re.M)]


def parse_figures(text: str, page: Path) -> tuple[list[Figure], list[str]]:
    """The figures a page quotes, and what is wrong with its tags: an inline tag (refused), a figure with no
    definition, a definition no figure uses, an id defined twice or not lowercase [a-z0-9-]+, a title that is not
    a key, a path outside the repository, a definition outside the section of a figure it serves."""
    text = _without_code(text)
    figs: list[Figure] = []
    errors = [f"an inline tag ({text[m.start():m.start() + 60]}...): write [figure][id] and its definition"
              for m in INLINE_TAG.finditer(text)]
    heads = _headings(text)
    section = lambda pos: bisect.bisect_right(heads, pos)  # noqa: E731
    defs: dict[str, tuple[str, re.Match, int]] = {}
    for d in DEF.finditer(text):
        if d["title"] is None:
            continue  # a plain link reference, not a figure's source
        fid = d["id"]
        if not FIG_ID.fullmatch(fid):
            errors.append(f"[{fid}]: a figure's id is lowercase letters, digits and '-'")
        if fid in defs:
            errors.append(f"[{fid}]: defined twice")
        key = KEY.fullmatch(d["title"])
        if not key:
            errors.append(f"[{fid}]: the title {d['title']!r} is not a JSON key (optionally *F or /F)")
            continue
        try:
            file = (page.parent / d["path"]).resolve().relative_to(ROOT.resolve()).as_posix()
        except ValueError:
            errors.append(f"[{fid}]: {d['path']} is outside the repository")
            continue
        defs[fid] = (file, key, d.start())
    used: set[str] = set()
    prose = _blank(text, r"`[^`\n]*`")  # x[0][1] in inline code is not a figure
    prose = _blank(prose, DEF.pattern, re.M)
    for r in REF.finditer(prose):
        fid, shown = r["id"], r["text"]
        if fid not in defs:
            if re.fullmatch(NUMBER, shown):
                errors.append(f"[{shown}][{fid}]: no definition of [{fid}]")
            continue
        used.add(fid)
        file, key, at = defs[fid]
        if not re.fullmatch(NUMBER, shown):
            errors.append(f"[{shown}][{fid}]: a figure's text is the number as shown, nothing else")
            continue
        if section(at) != section(r.start()):
            errors.append(f"[{shown}][{fid}]: its definition is in another section (it goes at the end of the "
                          f"figure's section)")
        figs.append(Figure(file, key["key"], key["op"], key["by"], shown, r.start(), r.end()))
    errors += [f"[{fid}]: defined but no figure uses it" for fid in defs if fid not in used]
    return sorted(figs, key=lambda f: f.start), errors


def _name(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def _figures():
    return [(_name(p), f) for p in PAGES + NOTES for f in parse_figures(p.read_text(), p)[0]]


def wrong_figures(figs: list[tuple[str, Figure]], loaded: dict[str, object]) -> list[str]:
    """Each figure whose number is not its file's (as rounded where shown), or whose file or key does not exist."""
    import json

    bad = []
    for page, f in figs:
        path = ROOT / f.file
        if not path.is_file():
            bad.append(f"{page}: {f.file} does not exist")
            continue
        if f.file not in loaded:  # each file parsed once: thousands of figures, some files tens of MB
            loaded[f.file] = json.loads(path.read_text())
        try:
            value = _resolve(loaded[f.file], f.key)
        except (KeyError, IndexError, ValueError, TypeError):
            bad.append(f"{page}: {f.file}:{f.key} is not in the file")
            continue
        try:
            value = f.scaled(float(value))
        except (TypeError, ValueError):
            bad.append(f"{page}: {f.file}:{f.key} is not a number ({value!r})")
            continue
        if not figtables.shows(value, f.num):  # the rule a generated table's numbers are made by
            bad.append(f"{page}: shows {f.num} for {f.file}:{f.key}, the file has {value}")
    return bad


_resolve = figtables.resolve


LF = "results/link-failure/results.json"
LF_KEY = "variants.dual-tor-clos.faults.0.converged_gap_ms"


def _lf(stat: str) -> float:
    import json

    return _resolve(json.loads((ROOT / LF).read_text()), f"{LF_KEY}.{stat}")


def test_the_reference_style_is_read():
    """The parser itself: a figure and its definition (path relative to the page) make one figure with the file
    from the repository's root; the figure's number is checked against the file."""
    mid = _lf("median")
    page = DOCS / "some-page.md"
    text = f"## A\nThe gap is [{mid}][lf-gap] ms.\n\n[lf-gap]: ../{LF} \"{LF_KEY}.median\"\n## B\n"
    figs, errors = parse_figures(text, page)
    assert not errors, errors
    assert [(f.file, f.key, f.num) for f in figs] == [(LF, f"{LF_KEY}.median", str(mid))]
    assert text[figs[0].start:figs[0].end] == f"[{mid}][lf-gap]"
    assert not wrong_figures([("t", f) for f in figs], {})
    # from the README the path is the repository's own
    figs, errors = parse_figures(f"[{mid}][g]\n\n[g]: {LF} \"{LF_KEY}.median\"\n", ROOT / "README.md")
    assert not errors and figs[0].file == LF
    # a scale factor in the title
    figs, errors = parse_figures(f"[{mid * 1000:.0f}][g]\n\n[g]: {LF} \"{LF_KEY}.median*1000\"\n", ROOT / "README.md")
    assert not errors and not wrong_figures([("t", f) for f in figs], {})
    # an example in a code block is not a figure, nor is x[0][1] in inline code
    assert parse_figures("```\n[1][nowhere]\n```\nand `a[0][1]`\n", page) == ([], [])


def test_a_wrong_number_fails():
    lo = _lf("min")
    figs, errors = parse_figures(f"[{lo + 1}][g]\n\n[g]: ../{LF} \"{LF_KEY}.min\"\n", DOCS / "p.md")
    assert not errors
    assert wrong_figures([("t", f) for f in figs], {}), "a figure that is not its file's passed"
    figs, _ = parse_figures(f"[{lo}][g]\n\n[g]: ../{LF} \"{LF_KEY}.no_such_key\"\n", DOCS / "p.md")
    assert wrong_figures([("t", f) for f in figs], {})
    figs, _ = parse_figures(f"[{lo}][g]\n\n[g]: {LF} \"{LF_KEY}.min\"\n", DOCS / "p.md")  # not relative to the page
    assert wrong_figures([("t", f) for f in figs], {})


def test_a_missing_an_unused_or_a_misplaced_definition_fails():
    page = DOCS / "p.md"
    d = f'../{LF} "{LF_KEY}.min"'
    assert parse_figures("gap [12.5][g] ms\n", page)[1]  # no definition
    assert parse_figures(f"gap 12.5 ms\n\n[g]: {d}\n", page)[1]  # defined, never used
    assert parse_figures(f"[1][g] and [2][h]\n\n[g]: {d}\n[g]: {d}\n[h]: {d}\n", page)[1]  # defined twice
    assert parse_figures(f"[1][G_1]\n\n[G_1]: {d}\n", page)[1]  # not a lowercase id
    assert parse_figures(f"[about][g]\n\n[g]: {d}\n", page)[1]  # not a number
    assert parse_figures(f"## A\n[1][g]\n## B\n[g]: {d}\n", page)[1]  # in another section
    assert parse_figures(f"[1][g]\n\n[g]: ../../{LF} \"k\"\n", page)[1]  # outside the repository
    assert parse_figures(f"gap <!--fig {LF}:{LF_KEY}.min-->125.5 ms\n", page)[1]  # the inline tag is refused


def test_tagged_figures_are_the_files_figures():
    figs = _figures()
    assert len(figs) >= 20, f"only {len(figs)} tagged figures: the README's key figures and the results pages carry tags"
    bad = wrong_figures(figs, {})
    assert not bad, "\n".join(bad)


def test_the_reference_style_tags_are_well_formed():
    bad = [f"{_name(p)}: {e}" for p in PAGES + NOTES for e in parse_figures(p.read_text(), p)[1]]
    assert not bad, "\n".join(bad)


def test_the_readmes_key_figures_each_name_their_file():
    """Every figure in the README's key-figures table is written from its file (a placeholder in the table's YAML)
    and its row links that file (a figure with no file goes)."""
    import yaml

    text = (ROOT / "README.md").read_text()
    block = figtables.BLOCK.search(text, text.index("## Key figures"))
    assert block and block["name"] == "key-figures", "README's key figures are not the generated block"
    spec = yaml.safe_load((ROOT / figtables.FIGURES_DIR / "key-figures.yml").read_text())
    rows = [r for r in block["body"].splitlines() if r.startswith("| ")][1:]
    assert rows and len(rows) == len(spec["rows"])
    for r, want in zip(rows, spec["rows"]):
        _, figure, source = [c.strip() for c in r.strip().strip("|").split("|")]
        if re.search(r"[0-9]", re.sub(r"\]\([^)]*\)", "", figure)):
            assert figtables.PLACEHOLDER.search(want[1]), f"README key figure not written from a file: {r}"
            links = re.findall(r"\]\((results/[^)\s]+)\)", source)
            assert links and all((ROOT / f).is_file() for f in links), f"README key figure without its file: {r}"


def _generated_table(bench: str, results: str, page: str = "scale.md") -> tuple[str, str]:
    """(what `bench/<bench> --table` makes of results/<results>, what docs/<page> holds between its markers)."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location(bench.removesuffix(".py"), ROOT / "bench" / bench)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    want = mod.table(json.loads((ROOT / "results" / results).read_text()))
    text = (DOCS / page).read_text()
    start = text.index("\n", text.index(f"<!-- generated by `bench/{bench} --table`")) + 1
    return want, text[start:text.index("\n<!-- end generated -->", start)]


def test_the_scale_ladder_table_is_the_shipped_files():
    """docs/notes/scale.md's ladder is `bench/scale.py --table` over results/scale/scale.json, as generated."""
    want, shown = _generated_table("scale.py", "scale/scale.json", "notes/scale.md")
    assert shown == want, "regenerate with bench/scale.py --table"


def test_the_ipmininet_table_is_the_shipped_file():
    """docs/scale.md's side by side with IPMininet is `bench/scale_vs_ipmininet.py --table` over
    results/scale/vs-ipmininet.json, as generated (its medians and ratios are computed, so no tag can hold them)."""
    want, shown = _generated_table("scale_vs_ipmininet.py", "scale/vs-ipmininet.json")
    assert shown == want, "regenerate with bench/scale_vs_ipmininet.py --table"


# Settings, not measurements, that docs/scale.md's "Measured here" names with a unit; anything else there with
# a unit must be a tagged figure (a measurement with no file goes, or gets one).
MEASURED_HERE_SETTINGS = ("T = 0.5/1/2 s", "T = 15 s", "T = 60 s", "BFD 100 ms × 3", "400 s timeout")
UNIT = re.compile(r"(?<![\w.])[0-9][0-9,]*(?:\.[0-9]+)?\s*(?:ms|s|µs|MiB|MB|GiB|GB|KB|%|×|x|pps|packets/s|CPU-s|"
                  r"[MG]bit/s|cores?)(?![\w])")


def _untagged_measurements(text: str) -> list[str]:
    start = text.index("\n## Measured here")
    end = text.find("\n## ", start + 1)
    section = text[text.index("\n", start + 1):end if end > 0 else None]  # the heading names the machine
    section = re.sub(r"`[^`]*`|\]\([^)]*\)|\[" + NUMBER + r"\]\[[^\]\n]*\]", "", section)
    section = DEF.sub("", section)
    for setting in MEASURED_HERE_SETTINGS:
        section = section.replace(setting, "")
    return [line.strip() for line in section.splitlines() if UNIT.search(line)]


def test_measured_here_quotes_only_tagged_figures():
    """docs/scale.md's "Measured here" holds no measurement without its file's tag."""
    got = _untagged_measurements("\n## Measured here\n- up: 1.2 s, [3][a] ms\n- T = 15 s: [2][b] s\n\n"
                                 "[a]: ../r.json \"a\"\n[b]: ../r.json \"b.c\"\n")
    assert len(got) == 1 and "1.2 s" in got[0], got  # the check itself: an untagged figure is found, a tagged one not
    bad = _untagged_measurements((DOCS / "scale.md").read_text())
    assert not bad, "untagged figures in docs/scale.md's Measured here (tag them or say what measures them):\n" + \
        "\n".join(bad)


def _units(text: str):
    """(start, end) of each paragraph, and of each table row on its own: where a figure's spread must be quoted."""
    pos = 0
    for block in re.split(r"(\n[ \t]*\n)", text):
        start, pos = pos, pos + len(block)
        if not any(line.lstrip().startswith("|") for line in block.splitlines()):
            yield start, pos
            continue
        for line in block.split("\n"):
            yield start, start + len(line)
            start += len(line) + 1


# Words that present a figure as one of several that differed; a figure equal in every repetition takes none.
SPREAD_WORDS = re.compile(r"median|min[/–-]|–max|range|spread", re.I)


def _hidden_repetitions(page: str, text: str, files: dict, path: Path | None = None) -> list[str]:
    """Every median figure in text whose repetitions differ but whose paragraph or table row does not quote the same
    key's min and max; and every one whose repetitions agree (or that is one run) but is presented with a spread.
    path is the page's (reference-style definitions are relative to it)."""
    import json

    text = _without_code(text)  # keep offsets, lines
    figs = parse_figures(text, path or DOCS / page)[0]
    text = _blank(text, DEF.pattern, re.M)  # a definition is not prose after a figure
    units = list(_units(text))
    bad = []
    for i, m in enumerate(figs):
        base, _, stat = m.key.rpartition(".")
        if stat not in ("median", "min") or not base:
            continue
        if m.file not in files:
            try:
                files[m.file] = json.loads((ROOT / m.file).read_text())
            except (OSError, ValueError):
                continue  # test_tagged_figures_are_the_files_figures reports it
        try:
            summary = _resolve(files[m.file], base)
        except (KeyError, IndexError, ValueError, TypeError):
            continue  # test_tagged_figures_are_the_files_figures reports it
        if not isinstance(summary, dict) or not isinstance(summary.get(stat), (int, float)):
            continue
        after = text[m.end:figs[i + 1].start if i + 1 < len(figs) else len(text)]
        after = re.split(r"\||\.\s|;|\n\s*\n", after)[0]
        said_same = re.search(r"in (every|each) repetition|in all [0-9]|every run", after)
        if said_same and isinstance(summary.get("max"), (int, float)):
            # "the same in every repetition" holds where the repetitions' extremes agree as far as the figure is shown
            places = len(m.num.split(".")[1]) if "." in m.num else 0
            if round(m.scaled(summary["min"]), places) != round(m.scaled(summary["max"]), places):
                bad.append(f"{page}: {m.file}:{m.key} is said to be the same in every repetition, but the "
                           f"repetitions gave {summary['min']}..{summary['max']}")
        if stat != "median":
            continue
        start, end = next((s, e) for s, e in units if s <= m.start < e)
        near = {g.key for g in figs if g.file == m.file and start <= g.start < end}
        if summary.get("n") == 1 or len({summary[k] for k in ("min", "median", "max") if k in summary}) == 1:
            # the figure after the tag, up to the next tag, cell or sentence end, must not claim a spread
            if SPREAD_WORDS.search(after) and not all(f"{base}.{k}" in near for k in ("min", "max")):
                bad.append(f"{page}: {m.file}:{m.key} is the same in every repetition, but is quoted as a "
                           f"median: {after.strip()[:60]!r}")
            continue
        # a bound the file does not hold (a map's ratios keep no min; an idle link's ratio is infinite) cannot be
        # tagged: the table shows it as a word or a sign
        missing = [k for k in ("min", "max") if summary.get(k) is not None and f"{base}.{k}" not in near]
        if missing:
            bad.append(f"{page}: {m.file}:{m.key} without its {' and '.join(missing)} "
                       f"(n={summary.get('n')}, {summary.get('min')}..{summary.get('max')})")
    return bad


def test_a_median_comes_with_its_min_and_max():
    """Every repetition visible: a median the docs quote has the same key's min and max tagged in its paragraph or
    table row (a stalled repetition cannot hide behind it), unless every repetition gave the same figure or there
    was one, and then it is not presented as a median."""
    import json

    f = "results/link-failure/results.json"
    k = "variants.dual-tor-clos.faults.0.converged_gap_ms"
    doc = json.loads((ROOT / f).read_text())
    lo, mid, hi = (_resolve(doc, f"{k}.{x}") for x in ("min", "median", "max"))
    assert lo != hi
    # the check itself: a bare median is found, one beside its min and max (in the same row) is not
    d = "\n\n" + "".join(f'[{x}]: ../{f} "{k}.{x}"\n' for x in ("min", "median", "max"))
    assert _hidden_repetitions("t", f"converged in [{mid}][median] ms (median).\n\n[median]: ../{f} \"{k}.median\"\n", {})
    assert not _hidden_repetitions("t", f"| [{lo}][min]/[{mid}][median]/[{hi}][max] |" + d, {})
    assert _hidden_repetitions("t", f"| [{lo}][min] |\n| [{mid}][median] | [{hi}][max] |" + d, {})
    # and "the same in every repetition" where the repetitions differ is found
    assert _hidden_repetitions("t", f"gap [{mid}][median] ms ([{lo}][min] in every repetition).\n\n"
                                    f"[median]: ../{f} \"{k}.median\"\n[min]: ../{f} \"{k}.min\"\n", {})
    # and a figure every repetition gave alike is not presented as a median
    k1 = "variants.dual-tor.faults.0.streams.downstream.blackholed_flows"
    same = _resolve(doc, f"{k1}.median")
    assert _resolve(doc, f"{k1}.min") == _resolve(doc, f"{k1}.max") == same
    d1 = f'\n\n[b]: ../{f} "{k1}.median"\n'
    assert _hidden_repetitions("t", f"[{same}][b] flows (median)." + d1, {})
    assert not _hidden_repetitions("t", f"[{same}][b] flows in every repetition." + d1, {})
    bad, files = [], {}
    for p in PAGES + NOTES:
        bad += _hidden_repetitions(_name(p), p.read_text(), files, p)
    assert not bad, "medians without their repetitions' min and max (quote min/median/max, or say the figure " \
                    "was the same in every repetition):\n" + "\n".join(bad)


# The raw Markdown reads as prose: a figure's tags (its brackets and definitions) stay under this
# share of a page's bytes; a page quotes the figures its reader needs, and every figure of a result is in the
# result's NOTES.md (not bound: a record, read beside its files). A table that quotes a figure per cell is a
# figures block, written from its files by hpnlab.docgen.figtables: its numbers carry no tags.
TAG_SHARE = 0.15


def tag_share(text: str) -> float:
    text = _without_code(text)
    tags = sum(len(m.group()) - len(m["text"]) for m in REF.finditer(text) if re.fullmatch(NUMBER, m["text"]))
    tags += sum(len(m.group()) + 1 for m in DEF.finditer(text) if m["title"] is not None)
    return tags / max(len(text), 1)


def test_figure_tags_are_a_small_part_of_each_page():
    prose = "The gap is [125.9][g] ms, " + "and the prose goes on " * 10 + "\n\n"
    assert tag_share(prose + f'[g]: ../{LF} "{LF_KEY}.median"\n') > TAG_SHARE  # the check itself: tags counted
    assert tag_share(prose * 10 + f'[g]: ../{LF} "{LF_KEY}.median"\n') < TAG_SHARE
    over = {p.name: round(100 * tag_share(p.read_text())) for p in PAGES if tag_share(p.read_text()) >= TAG_SHARE}
    assert not over, f"figure tags over {TAG_SHARE:.0%} of the page (% of its bytes; quote fewer figures, move " \
                     f"detail to the result's NOTES.md): {over}"


def _blocks(text: str) -> list[tuple[int, str]]:
    """(line, text) of each heading and each paragraph (outside code blocks), whitespace normalised."""
    text = _without_code(text)
    out, line = [], 1
    for block in re.split(r"(\n[ \t]*\n)", text):
        if block.strip() and not block.startswith("\n"):
            for head in re.findall(r"^#{1,6} .*$", block, flags=re.M):
                out.append((line, " ".join(head.split())))
            para = " ".join(re.sub(r"^#{1,6} .*$", "", block, flags=re.M).split())
            if para:
                out.append((line, para))
        line += block.count("\n")
    return out


def repeated_blocks(text: str) -> list[str]:
    """Each heading that a page holds twice, and each paragraph of more than a line (table rows, definitions and
    short lines may repeat)."""
    seen: dict[str, int] = {}
    bad = []
    for line, block in _blocks(text):
        if not block.startswith("#") and (len(block) < 120 or block.startswith(("|", "["))):
            continue
        if block in seen:
            bad.append(f"line {line} repeats line {seen[block]}: {block[:70]!r}")
        seen.setdefault(block, line)
    return bad


def test_no_page_repeats_a_heading_or_paragraph():
    para = "A paragraph long enough to count as one, " * 4
    assert repeated_blocks(f"# A\n\n## B\n\n{para}\n\n## C\n\n{para}\n") == [f"line 9 repeats line 5: {para[:70]!r}"]
    assert repeated_blocks("# A\n\n## B\n\ntext\n\n## B\n\nother\n")
    assert not repeated_blocks(f"# A\n\n```\n## B\n```\n\n## B\n\n{para}\n\n| x |\n\n| x |\n")
    bad = [f"{p.name} {b}" for p in PAGES for b in repeated_blocks(p.read_text())]
    assert not bad, "\n".join(bad)


def venv_commands(text: str) -> list[str]:
    """Lines that run hpnlab as .venv/bin/hpnlab: the documented form is `hpnlab` (./bootstrap install links it
    system-wide), except where the install itself is shown."""
    return [line.strip() for line in text.splitlines() if re.search(r"\.venv/bin/hpnlab\b", line)
            and not re.search(r"bootstrap|pip install|python3? -m venv", line)]


def test_the_docs_run_hpnlab_as_hpnlab():
    assert venv_commands("sudo .venv/bin/hpnlab up\n") and venv_commands("x `.venv/bin/hpnlab down` y\n")
    assert not venv_commands("bootstrap: /usr/local/bin/hpnlab -> ~/hpnlab/.venv/bin/hpnlab\n")
    bad = [f"{p.name}: {c}" for p in PAGES for c in venv_commands(p.read_text())]
    assert not bad, "write `hpnlab` (or `sudo hpnlab`), not .venv/bin/hpnlab:\n" + "\n".join(bad)


def figures_stated_twice(figs: list[Figure]) -> list[str]:
    """A figure (one file, key and scale) that a page shows as two different numbers."""
    shown: dict[tuple, Figure] = {}
    bad = []
    for f in figs:
        first = shown.setdefault((f.file, f.key, f.op, f.by), f)
        if first.num != f.num:
            bad.append(f"{f.file}:{f.key} shown as {first.num} and as {f.num}")
    return bad


def test_a_page_states_a_figure_one_way():
    figs, _ = parse_figures(f"[125.9][a] and later [126][b]\n\n[a]: ../{LF} \"k.median\"\n[b]: ../{LF} \"k.median\"\n",
                            DOCS / "p.md")
    assert figures_stated_twice(figs)
    # a figure a generated table prints and the prose tags is one figure too
    readme = ROOT / "README.md"
    block = figtables.BLOCK.search(readme.read_text(), readme.read_text().index("## Key figures")).group()
    prose = f"{block}\n\nThe gap: [{_lf('median') - 0.1:.1f}][g] ms.\n\n[g]: {LF} \"{LF_KEY}.median\"\n"
    assert figures_stated_twice(_all_figures(readme, prose))
    bad = [f"{_name(p)}: {b}" for p in PAGES + NOTES for b in figures_stated_twice(_all_figures(p))]
    assert not bad, "\n".join(bad)


def _all_figures(page: Path, text: str | None = None) -> list[Figure]:
    """The page's tagged figures and the numbers its figures blocks print (a figure in a table and in the prose is
    one figure)."""
    text = page.read_text() if text is None else text
    generated = [Figure(g.file, g.key, g.op, g.by, g.num, 0, 0) for g in figtables.regenerate(text, page, ROOT)[1]]
    return parse_figures(text, page)[0] + generated


# A reference page says what is true now; how it came to be is in the notes. A dated entry, an issue number or a
# commit hash (a result's provenance names its commit; a page need not) marks a development log.
LOG_ENTRY = re.compile(r"\bissues? #?[0-9]+\b|\bcommit [0-9a-f]{7,40}\b|(?<![\w/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])"
                       r"[0-9a-f]{7,40}(?![\w/.-])|\b20[0-9]{2}-[01][0-9]-[0-3][0-9]\b|\b[0-9]{1,2} (?:Jan|Feb|Mar|Apr|"
                       r"May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* 20[0-9]{2}\b", re.I)


def log_entries(text: str) -> list[str]:
    text = _blank(_without_code(text), DEF.pattern, re.M)
    return [text[max(m.start() - 30, 0):m.end() + 10].replace("\n", " ") for m in LOG_ENTRY.finditer(text)]


def test_the_reference_pages_hold_no_development_log():
    assert len(log_entries("as issue 41 found; since commit 338432a, and on 2026-11-26 it ran; a2f9c31 again")) == 4
    assert not log_entries("hash seed 0x1f, 10.0.2.2, 1e9 packets, tests/test_docs.py, 25 reissues\n```\nissue 3\n```\n")
    bad = [f"{p.name}: ...{e}..." for p in PAGES for e in log_entries(p.read_text())]
    assert not bad, "history in a reference page (move it to the result's NOTES.md or docs/notes/):\n" + "\n".join(bad)

"""The docs say what the code does: the generated references match the models and the parser (drift
fails here: regenerate with `python -m hpnlab.docgen docs`), every command and flag the README and docs
show exists, every API name they use imports, every link points at a file, summary.txt's columns are
all explained, and the README's first screen stays a screen."""

from __future__ import annotations

import argparse
import importlib
import re
import shlex

import pytest

from hpnlab import docgen
from hpnlab.cli import build_parser
from tests.conftest import ROOT

DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("name", sorted(docgen.PAGES))
def test_generated_references_match_the_code(name):
    have = (DOCS / name).read_text() if (DOCS / name).exists() else ""
    assert have == docgen.PAGES[name](), f"docs/{name} drifted from the code: python -m hpnlab.docgen docs"


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
    for p in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)", p.read_text()):
            if "://" in target:
                continue
            assert (p.parent / target).exists(), f"{p.name}: link to {target}, which does not exist"


def test_summary_columns_are_all_explained():
    from hpnlab.traffic.report import COLUMNS

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

"""--help that helps: every positional described, no line past 100 columns, the same runtime choices
everywhere (the registry's), defaults shown where an option has one."""

from __future__ import annotations

import argparse

import pytest

from hpnlab.cli import build_parser, walk_parsers
from hpnlab.runtime import names as runtime_names


PARSERS = list(walk_parsers(build_parser(), ["hpnlab"]))


@pytest.mark.parametrize("path,parser", PARSERS, ids=[" ".join(p) for p, _ in PARSERS])
def test_every_argument_is_described_and_help_fits_a_terminal(path, parser):
    for a in parser._actions:
        if isinstance(a, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
            continue
        assert a.help, f"{' '.join(path)}: '{a.dest}' has no help"
        if a.dest == "runtime":
            assert list(a.choices) == runtime_names(), f"{' '.join(path)}: --runtime choices"
        if a.option_strings and a.default not in (None, False, argparse.SUPPRESS) and a.nargs != 0:
            shown = parser._get_formatter()._get_help_string(a)
            assert "default" in shown.lower(), f"{' '.join(path)}: the default of {a.option_strings[0]} is not shown"
    long = [ln for ln in parser.format_help().splitlines() if len(ln) > 100]
    assert not long, long


def test_the_plugin_offers_every_runtime():
    import hpnlab.pytest_plugin as plugin

    seen = {}

    class G:
        def addoption(self, name, **kw):
            seen[name] = kw

    class P:
        def getgroup(self, *_a, **_k):
            return G()

        def addini(self, *_a, **_k):
            pass

    plugin.pytest_addoption(P())
    assert list(seen["--hpnlab-runtime"]["choices"]) == runtime_names()

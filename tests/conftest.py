"""Shared fixtures. Root/FRR-dependent tests skip with a printed reason where the machine cannot run them."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The suite's runs check function, not figures, and the suite itself keeps the machine busy: `hpnlab run`
# and the benches it starts go on at once (hpnlab.instrument.machineload), recorded as busy. The tests of that check
# take the variable out themselves.
os.environ.setdefault("HPNLAB_BUSY_OK", "1")
SHARED = ROOT.parent / "shared"
SCHEMA = SHARED / "schemas" / "clab.schema.json"
EXAMPLES = ROOT / "examples"


def _skip(reason: str):
    print(f"SKIP: {reason}", file=sys.stderr)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def clab_schema():
    if not SCHEMA.exists():
        _skip(f"containerlab schema not found at {SCHEMA} (../shared beside the checkout)")
    # The schema's address patterns end in ECMAScript's [\p{N}\p{L}] (an interface zone: letters and
    # digits), which Python's re cannot compile; [^\W_] is the same class in Python's Unicode regexes.
    return json.loads(SCHEMA.read_text().replace(r"[\\p{N}\\p{L}]", r"[^\\W_]"))  # as JSON text


@pytest.fixture(scope="session")
def vtysh():
    path = shutil.which("vtysh") or ("/usr/bin/vtysh" if os.path.exists("/usr/bin/vtysh") else None)
    if not path:
        _skip("vtysh not installed (Debian package frr); .ci/run installs it")
    return path


def pytest_report_header(config):
    return [f"shared schema: {'found' if SCHEMA.exists() else 'MISSING'} at {SCHEMA}",
            f"root: {os.geteuid() == 0}, vtysh: {shutil.which('vtysh')}"]

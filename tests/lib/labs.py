"""What lab tests share: skipping where labs cannot run, the CLI as a subprocess, running a command in a
node, polling for a state, and checking that a lab left nothing behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

VMAC = "00:00:5e:00:01:01"
HPN = [sys.executable, "-m", "hpnlab.cli"]


def _need_lab_machine():
    why = None
    if os.geteuid() != 0:
        why = "needs root for network namespaces"
    elif not Path("/usr/lib/frr/zebra").exists():
        why = "needs Debian's frr (/usr/lib/frr/zebra); ./bootstrap installs it"
    elif not shutil.which("tcpdump") or not shutil.which("nft"):
        why = "needs tcpdump and nftables; ./bootstrap installs them"
    if why:
        print(f"SKIP: {why}", file=sys.stderr)
        pytest.skip(why)


def hpnlab(*args, timeout=180, check=True) -> subprocess.CompletedProcess:
    r = subprocess.run([*HPN, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"hpnlab {' '.join(args)} -> {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def nsexec(lab, node, *argv, timeout=30, check=False) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", f"{lab}-{node}", *argv], capture_output=True, text=True,
                          timeout=timeout, check=check)


def routes(lab, node) -> set[str]:
    out = nsexec(lab, node, "ip", "-4", "-j", "route", "show").stdout
    return {r["dst"] for r in json.loads(out or "[]") if "linkdown" not in r.get("flags", [])}


def poll(fn, timeout=5.0, interval=0.02):
    """FRR topotest style: poll for the expected state until a deadline, never a blind sleep."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(interval)


def settle(problems, timeout: float, what: str, interval: float = 0.5) -> None:
    """Poll ``problems()`` (a dict, empty once the state holds) until it is empty; print what was seen on the
    way (-rP shows it), so a transient stays visible; fail with the last problems after ``timeout`` s."""
    seen: list[dict] = []
    deadline = time.monotonic() + timeout
    while True:
        bad = problems()
        if not bad:
            break
        seen.append(bad)
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still not so after {timeout:g} s: {bad}")
        time.sleep(interval)
    if seen:
        print(f"{what}: not so in {len(seen)} reads before it held; first: {seen[0]}")


def owned_lab(plugin_lab):
    """A module's ``lab`` fixture body over the plugin's lab: skip where labs cannot run, and after the
    module's last test take the lab down and check that it left nothing behind."""
    _need_lab_machine()
    yield plugin_lab
    plugin_lab.down()
    assert leftovers(plugin_lab.name) == []


def leftovers(lab: str) -> list[str]:
    """Everything a lab could leave behind: what carries its name (hpnlab.lifecycle.orchestrate.leftovers, the
    same list `down` is checked against) and nftables tables in the root namespace."""
    from hpnlab.lifecycle.orchestrate import leftovers as named

    out = named(lab)
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    out += [f"root nft {t}" for t in tables.splitlines() if "hpnlab" in t]
    return out

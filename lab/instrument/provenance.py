"""Where a result came from: the code, the machine and the software it ran on, for results.json's
``provenance`` (docs/results.md). Every figure is read here and never raises: what cannot be read is
"unknown" (a wheel install has no git checkout, a machine without FRR has no zebra).

``collect`` is the machine and the code when a run starts (with the load and CPU pressure the quiet-machine
check read before it: hpnlab.instrument.machineload); ``summarise`` adds what the variants ran (the
congestion control their workload sockets reported, the hosts' driver), read from the results' variants;
``code`` is the hpnlab that ran (or re-analysed) them.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path

from hpnlab.instrument import machineload
from hpnlab.model import netdefaults

UNKNOWN = "unknown"
ZEBRA = Path("/usr/lib/frr/zebra")
PROC_TCP_DEFAULT = Path("/proc/sys/net/ipv4/tcp_congestion_control")
HERE = Path(__file__).resolve().parents[1]  # the hpnlab package's folder (lab/ in a checkout)


def _run(argv: list[str], timeout: float = 10) -> str | None:
    """stdout of argv, or None when it cannot run or fails."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def git_checkout(where: Path = HERE) -> dict:
    """{commit, dirty} of the hpnlab checkout ``where`` lies in; "unknown" for both outside one (an
    installed wheel, no git, a repository that is not hpnlab's). ``dirty``: tracked files differ from the
    commit (untracked files do not count). Takes no lock: others may be committing in the same tree."""
    top = _run(["git", "-C", str(where), "rev-parse", "--show-toplevel"])
    if not top or not _is_hpnlab(Path(top.strip())):
        return _stamped(where)
    commit = _run(["git", "-C", str(where), "rev-parse", "HEAD"])
    status = _run(["git", "--no-optional-locks", "-C", str(where), "status", "--porcelain", "--untracked-files=no"])
    return {"commit": commit.strip() if commit else UNKNOWN,
            "dirty": bool(status.strip()) if status is not None else UNKNOWN}


# The folders whose files make a figure: the lab and its node programs, the traffic and its analysis, the
# templates nodes are configured from, the specs, the experiments and the benches. A shared work tree is
# nearly always dirty somewhere (docs, results being written); an edit here is what makes a figure's code
# not the commit's.
CODE_DIRS = ("lab", "traffic", "templates", "examples", "experiments", "bench")


def dirty_paths(where: Path = HERE) -> list[str] | str:
    """The files under CODE_DIRS of the hpnlab checkout ``where`` lies in that are not the commit's: changed,
    added, deleted, renamed (both names) or untracked (a new module the code imports is uncommitted code as
    much as an edit), sorted; [] when that code is the commit's; "unknown" outside a checkout."""
    top = _run(["git", "-C", str(where), "rev-parse", "--show-toplevel"])
    if not top or not _is_hpnlab(Path(top.strip())):
        return UNKNOWN
    out = _run(["git", "--no-optional-locks", "-C", top.strip(), "status", "--porcelain", "-z",
                "--untracked-files=all", "--", *CODE_DIRS])
    if out is None:
        return UNKNOWN
    paths, entries = set(), iter(out.split("\0"))
    for e in entries:  # "XY path", and for a rename or copy the next entry is the old path
        if len(e) > 3:
            paths.add(e[3:])
            if "R" in e[:2] or "C" in e[:2]:
                paths.add(next(entries, ""))
    return sorted(p for p in paths if p)


# A checkout copied without its .git (the VMs get the tree as a tar: vm/run.py) carries its commit in this file
# at its top, written by whoever copied it; without it such a run's results could not say what code made them.
SOURCE_STAMP = ".hpnlab-source.json"


def _stamped(where: Path) -> dict:
    """{commit, dirty} from the SOURCE_STAMP at the top of the hpnlab tree ``where`` lies in, else unknown."""
    for d in (where, *where.parents):
        if (d / "pyproject.toml").exists():
            if not _is_hpnlab(d):
                break
            try:
                stamp = json.loads((d / SOURCE_STAMP).read_text())
                commit, dirty = stamp["commit"], stamp["dirty"]
            except (OSError, ValueError, KeyError, TypeError):
                break
            if isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit) and isinstance(dirty, bool):
                return {"commit": commit, "dirty": dirty}
            break
    return {"commit": UNKNOWN, "dirty": UNKNOWN}


def _is_hpnlab(top: Path) -> bool:
    try:
        return re.search(r'(?m)^name\s*=\s*"hpnlab"', (top / "pyproject.toml").read_text()) is not None
    except OSError:
        return False


def version() -> str:
    """hpnlab's installed version (importlib.metadata)."""
    try:
        return metadata.version("hpnlab")
    except metadata.PackageNotFoundError:
        return UNKNOWN


def frr_version(zebra: Path = ZEBRA) -> str:
    """FRR's version: ``zebra --version`` ("zebra version 8.4.4"), else the Debian package's, else "unknown"."""
    out = _run([str(zebra), "--version"])
    m = re.search(r"version\s+(\S+)", out or "")
    if m:
        return m.group(1)
    out = _run(["dpkg-query", "-W", "-f=${Version}", "frr"])
    return out.strip() if out and out.strip() else UNKNOWN


def cores() -> dict:
    """{usable: CPUs this process may run on (its affinity), online: CPUs of the machine}."""
    try:
        usable: int | str = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = UNKNOWN
    return {"usable": usable, "online": os.cpu_count() or UNKNOWN}


def tcp_default(path: Path = PROC_TCP_DEFAULT) -> str:
    """The kernel's default congestion control (what a socket that asks for none runs; workloads ask)."""
    try:
        return path.read_text().strip() or UNKNOWN
    except OSError:
        return UNKNOWN


def code() -> dict:
    """The hpnlab that runs: {version, commit, dirty, python}."""
    return {"version": version(), **git_checkout(), "python": platform.python_version()}


def collect() -> dict:
    """The code and this machine, when a run starts (``summarise`` adds the variants' part at its end)."""
    return {**code(), "dirty_paths": dirty_paths(), "kernel": os.uname().release, "kernel_tcp_default": tcp_default(), "frr": frr_version(),
            "cores": cores(),
            # The machine-wide values every namespace shares, and the root's TCP buffer bounds (which a
            # lab's hosts override with host_tcp_buffers): hpnlab.model.netdefaults.
            "root_sysctls": netdefaults.read_shared(), "host_tcp_buffers": dict(netdefaults.HOST_TCP_BUFFERS),
            "machine_load": machine_load()}


def machine_load() -> dict:
    """The load and CPU pressure before the run started (hpnlab.instrument.machineload.settle's record), or, where no
    check ran in this process, a reading now, marked ``checked: false``."""
    rec = machineload.last()
    return dict(rec, checked=True) if rec is not None else {"at_collect": machineload.read(), "checked": False}


def summarise(variants: dict[str, dict]) -> dict:
    """Per variant, the congestion control its workload's sockets ran (``variants.<v>.congestion.ran``;
    None where its workload sends no TCP, [] where nothing reported) and its hosts' driver."""
    cc, drivers = {}, {}
    for name, v in variants.items():
        rec = v.get("congestion") if isinstance(v.get("congestion"), dict) else {}
        cc[name] = rec.get("ran") if rec.get("requested") else None
        drivers[name] = v.get("host_driver")
    return {"congestion": cc, "host_driver": drivers}

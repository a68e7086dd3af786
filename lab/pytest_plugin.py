"""pytest plugin (entry point ``pytest11``: installing hpnlab is enough) for users' own lab tests.

    import pytest
    pytestmark = pytest.mark.hpnlab(spec="examples/default.yml", overrides={"tier2": "clos"})

    def test_failover(hpnlab_lab):                     # one lab per module, verified before the first test
        with hpnlab_lab.probes(src="s1h0", dst="s0h0") as p:
            with hpnlab_lab.fault("link-down", node="s0h0", iface="r0p0"):
                ...
        p.result.assert_disruption(max_gap_ms=300)

Options: --hpnlab-spec (when a module's marker names none), --hpnlab-runtime netns|clab|c9s, --hpnlab-keep
(leave a module's lab up after a failure), --hpnlab-pcap (capture on every host port during each test),
--hpnlab-artifacts DIR. On a failure, the lab's FRR and agent logs, the test's probe reports and pcaps
land in DIR/<test name>/. Lab names are unique per module and per pytest-xdist worker. Without root or
FRR a lab test skips, printing why.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

MARK = "hpnlab"
FAILED = pytest.StashKey[set]()  # modules with a failed test (for --hpnlab-keep)


def pytest_addoption(parser) -> None:
    g = parser.getgroup("hpnlab", "hpnlab labs (network namespaces or containerlab)")
    g.addoption("--hpnlab-spec", default=None, help="lab spec for modules whose hpnlab marker names none "
                                                    "(default: the shipped examples/default.yml)")
    from hpnlab.runtime import names as runtime_names

    g.addoption("--hpnlab-runtime", default=None, choices=runtime_names(),
                help="runtime for every lab (default: the marker's runtime, else netns)")
    g.addoption("--hpnlab-keep", action="store_true", help="leave a module's lab up when one of its tests failed")
    g.addoption("--hpnlab-pcap", action="store_true", help="capture on every host port during each lab test; "
                                                           "kept for failed tests")
    g.addoption("--hpnlab-artifacts", default="hpnlab-artifacts",
                help="where failed tests' logs, probe reports and pcaps go (default ./hpnlab-artifacts)")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "hpnlab(spec=None, overrides=None, runtime=None, name=None, timeout=90): "
                                       "the lab the hpnlab_lab fixture brings up for this module")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"hpnlab_rep_{rep.when}", rep)
    if rep.failed and rep.when in ("setup", "call"):
        item.config.stash.setdefault(FAILED, set()).add(item.module.__name__)


def _skip(why: str):
    print(f"SKIP: {why}", file=sys.stderr)
    pytest.skip(why)


def lab_name(module_id: str, given: str | None, worker: str | None) -> str:
    """A lab name unique per module and per xdist worker, within the 10 characters a name may have."""
    base = given or "t" + hashlib.sha1(module_id.encode()).hexdigest()[:5]
    if not worker:
        return base
    digits = re.sub(r"\D", "", worker) or "0"
    return base[:9 - len(digits)] + "w" + digits


@pytest.fixture(scope="module")
def hpnlab_lab(request):
    """The module's lab, brought up and verified once, removed after the module (unless --hpnlab-keep
    and a test failed)."""
    from hpnlab.api import Lab, resolve_spec
    from hpnlab.errors import RuntimeFailure
    from hpnlab.runtime import get as get_runtime

    mark = request.node.get_closest_marker(MARK)
    kw = dict(mark.kwargs) if mark else {}
    cfg = request.config
    spec = kw.get("spec") or cfg.getoption("--hpnlab-spec") or None
    runtime = cfg.getoption("--hpnlab-runtime") or kw.get("runtime") or "netns"
    name = lab_name(request.node.nodeid, kw.get("name"), os.environ.get("PYTEST_XDIST_WORKER"))
    sp = resolve_spec(spec or "default", name, kw.get("overrides"))  # a bad spec fails, never skips
    if os.geteuid() != 0:
        _skip("hpnlab labs need root (network namespaces, FRR, nftables)")
    try:
        cls = get_runtime(runtime)
        cls.preflight(sp)
    except RuntimeFailure as e:
        _skip(f"hpnlab {runtime} runtime not usable here: {e}")
    if cls.shares_kernel:
        from hpnlab.machine import kernel

        refusal = kernel.assess(sp).refusal
        if refusal:  # e.g. hash.seed per-switch on a kernel older than 6.11: the lab would not be that fabric
            _skip(f"this kernel ({kernel.release()}) cannot run the lab's spec: {refusal}")
    lab = Lab.up(sp, runtime=runtime, timeout=kw.get("timeout", 90))
    yield lab
    if cfg.getoption("--hpnlab-keep") and request.module.__name__ in cfg.stash.get(FAILED, set()):
        print(f"\nhpnlab: lab '{lab.name}' left up after a failure ('hpnlab down --lab {lab.name}' removes it)",
              file=sys.stderr)
        return
    lab.down()


def _artifact_dir(item) -> Path:
    root = Path(item.config.getoption("--hpnlab-artifacts"))
    if not root.is_absolute():
        root = Path(item.config.invocation_params.dir) / root
    return root / re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid)[-150:]


@pytest.fixture(autouse=True)
def _hpnlab_per_test(request):
    """Per test of a module with a lab: captures (--hpnlab-pcap), and on failure the evidence."""
    if "hpnlab_lab" not in request.fixturenames:
        yield
        return
    lab = request.getfixturevalue("hpnlab_lab")
    from hpnlab.traffic.run.nodetools import Capture

    probes_before = len(lab._probe_runs)
    caps = []
    pcap_dir = lab.workdir / "pcap" / re.sub(r"\W+", "_", request.node.name)[-80:]
    if request.config.getoption("--hpnlab-pcap"):
        pcap_dir.mkdir(parents=True, exist_ok=True)
        for h in lab.hosts:
            for i in lab.cfgs[h].iface_names:
                caps.append(Capture(lab.runtime, lab.cfgs, h, i, pcap_dir / f"{h}-{i}.pcap"))
    yield
    for c in caps:
        try:
            c.stop()
        except Exception:  # a capture that wrote nothing is not the test's failure
            pass
    rep = getattr(request.node, "hpnlab_rep_call", None) or getattr(request.node, "hpnlab_rep_setup", None)
    if rep is not None and rep.failed:
        dest = _artifact_dir(request.node)
        dest.mkdir(parents=True, exist_ok=True)
        for fname, src in lab.log_files().items():
            _copy(src, dest / "logs" / fname)
        for run in lab._probe_runs[probes_before:]:
            shutil.copytree(run, dest / run.name, dirs_exist_ok=True)
        if caps:
            shutil.copytree(pcap_dir, dest / "pcap", dirs_exist_ok=True)
        print(f"\nhpnlab: logs, probe reports{' and pcaps' if caps else ''} of the failed test: {dest}",
              file=sys.stderr)
    shutil.rmtree(pcap_dir, ignore_errors=True)


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copyfile(src, dst)
    except OSError:
        pass

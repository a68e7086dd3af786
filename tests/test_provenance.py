"""results.json's provenance (hpnlab.instrument.provenance): what is read, "unknown" where it cannot be, never an
error; the runner records it and --reanalyse keeps the run's own beside the re-analysing hpnlab."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from hpnlab.instrument import provenance
from hpnlab.traffic import runner
from hpnlab.traffic.run import experiment
from tests.conftest import ROOT


def test_this_checkout_has_a_commit_and_says_whether_it_is_dirty():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    g = provenance.git_checkout()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert g["commit"] == head and re.fullmatch(r"[0-9a-f]{40}", g["commit"])
    assert isinstance(g["dirty"], bool)


def test_outside_a_checkout_or_in_another_repository_it_is_unknown(tmp_path):
    assert provenance.git_checkout(tmp_path) == {"commit": "unknown", "dirty": "unknown"}
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    (other / "pyproject.toml").write_text('[project]\nname = "something-else"\n')
    assert provenance.git_checkout(other) == {"commit": "unknown", "dirty": "unknown"}
    assert provenance.git_checkout(tmp_path / "missing") == {"commit": "unknown", "dirty": "unknown"}


def test_a_dirty_tree_is_dirty_and_untracked_files_do_not_count(tmp_path):
    repo = tmp_path / "hp"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    (repo / "pyproject.toml").write_text('[project]\nname = "hpnlab"\n')
    for argv in (["init", "-q"], ["add", "pyproject.toml"], ["commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, env=env)
    (repo / "new.txt").write_text("untracked")
    g = provenance.git_checkout(repo)
    assert g["dirty"] is False and re.fullmatch(r"[0-9a-f]{40}", g["commit"])
    (repo / "pyproject.toml").write_text('[project]\nname = "hpnlab"\nversion = "9"\n')
    assert provenance.git_checkout(repo)["dirty"] is True


def test_dirty_paths_names_the_code_that_is_not_the_commits(tmp_path):
    """Only files under the code's folders count, untracked ones too, a rename by both names; a tree whose
    code is the commit's gives [] however dirty its docs are; outside a checkout, unknown."""
    repo = tmp_path / "hp"
    for d in ("lab", "bench", "docs", "results"):
        (repo / d).mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    (repo / "pyproject.toml").write_text('[project]\nname = "hpnlab"\n')
    for f in ("lab/a.py", "lab/b.py", "bench/old.py", "docs/x.md"):
        (repo / f).write_text("x\n")
    for argv in (["init", "-q"], ["add", "."], ["commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, env=env)
    assert provenance.dirty_paths(repo / "lab") == []
    (repo / "docs" / "x.md").write_text("edited\n")
    (repo / "results" / "r.json").write_text("{}")
    (repo / "pyproject.toml").write_text('[project]\nname = "hpnlab"\nversion = "9"\n')
    assert provenance.dirty_paths(repo) == [] and provenance.git_checkout(repo)["dirty"] is True
    (repo / "lab" / "a.py").write_text("edited\n")
    (repo / "lab" / "b.py").unlink()
    (repo / "lab" / "new name.py").write_text("untracked\n")
    subprocess.run(["git", "-C", str(repo), "mv", "bench/old.py", "bench/new.py"], check=True)
    assert provenance.dirty_paths(repo) == ["bench/new.py", "bench/old.py", "lab/a.py", "lab/b.py", "lab/new name.py"]
    assert provenance.dirty_paths(tmp_path / "elsewhere") == "unknown"


def test_a_tree_copied_without_git_reads_its_stamp(tmp_path):
    """The VMs get the checkout as a tar with no .git; vm/run.py puts the commit beside it."""
    tree = tmp_path / "src"
    (tree / "lab").mkdir(parents=True)
    (tree / "pyproject.toml").write_text('[project]\nname = "hpnlab"\n')
    assert provenance.git_checkout(tree / "lab") == {"commit": "unknown", "dirty": "unknown"}
    stamp = tree / provenance.SOURCE_STAMP
    stamp.write_text(json.dumps({"commit": "a" * 40, "dirty": False}))
    assert provenance.git_checkout(tree / "lab") == {"commit": "a" * 40, "dirty": False}
    for bad in ('{"commit": "HEAD", "dirty": false}', '{"commit": null}', "not json", "[]"):
        stamp.write_text(bad)
        assert provenance.git_checkout(tree / "lab") == {"commit": "unknown", "dirty": "unknown"}, bad
    # a stamp in some other project's tree is not hpnlab's
    (tree / "pyproject.toml").write_text('[project]\nname = "other"\n')
    stamp.write_text(json.dumps({"commit": "a" * 40, "dirty": False}))
    assert provenance.git_checkout(tree / "lab") == {"commit": "unknown", "dirty": "unknown"}


def test_no_git_at_all_is_unknown(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert provenance.git_checkout() == {"commit": "unknown", "dirty": "unknown"}


def test_version_frr_cores_kernel_python(monkeypatch, tmp_path):
    assert provenance.version() == metadata.version("hpnlab")

    def missing(_name):
        raise metadata.PackageNotFoundError("hpnlab")

    monkeypatch.setattr(provenance.metadata, "version", missing)
    assert provenance.version() == "unknown"
    zebra = tmp_path / "zebra"
    zebra.write_text("#!/bin/sh\necho 'zebra version 9.1.2'\necho 'Copyright 1996-2005'\n")
    zebra.chmod(0o755)
    assert provenance.frr_version(zebra) == "9.1.2"
    monkeypatch.setattr(provenance, "_run", lambda argv, timeout=10: None)  # no zebra, no dpkg
    assert provenance.frr_version(tmp_path / "none") == "unknown"
    monkeypatch.setattr(provenance, "_run", lambda argv, timeout=10: "8.4.4-1.1~deb12u2" if argv[0] == "dpkg-query"
                        else None)
    assert provenance.frr_version(tmp_path / "none") == "8.4.4-1.1~deb12u2"
    c = provenance.cores()
    assert c["usable"] == len(os.sched_getaffinity(0)) and c["online"] == os.cpu_count()
    assert provenance.tcp_default(tmp_path / "none") == "unknown"


def test_collect_has_every_key():
    p = provenance.collect()
    assert set(p) == {"version", "commit", "dirty", "dirty_paths", "python", "kernel", "kernel_tcp_default", "frr",
                      "cores", "root_sysctls", "host_tcp_buffers", "machine_load"}
    assert set(p["root_sysctls"]) == {"net.core.netdev_max_backlog", "net.core.rmem_max", "net.core.wmem_max",
                                      "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}
    assert p["root_sysctls"]["net.core.rmem_max"] == Path("/proc/sys/net/core/rmem_max").read_text().strip()
    assert p["host_tcp_buffers"]["net.ipv4.tcp_rmem"] == "4096 131072 6291456"
    assert p["kernel"] == os.uname().release and p["python"] == platform.python_version()
    json.dumps(p)


def test_summarise_reads_the_variants():
    variants = {"a": {"congestion": {"requested": "cubic", "ran": ["cubic"]}, "host_driver": "userspace"},
                "probes-only": {"congestion": {"requested": None, "ran": []}, "host_driver": "bond"},
                "failed": {"congestion": {"requested": "cubic", "ran": []}, "error": "x"},
                "old": {}}
    assert provenance.summarise(variants) == {
        "congestion": {"a": ["cubic"], "probes-only": None, "failed": [], "old": None},
        "host_driver": {"a": "userspace", "probes-only": "bond", "failed": None, "old": None}}


def test_reanalyse_keeps_the_runs_provenance_and_adds_its_own(tmp_path):
    exp = experiment.load(experiment.find("link-failure"), ["dual-tor"], 1, None)
    original = {"commit": "0" * 40, "dirty": False, "version": "0.0.1", "kernel": "6.1.0-9-amd64"}
    (tmp_path / "results.json").write_text(json.dumps({"experiment": "x", "provenance": original, "variants": {}}))
    res = runner.reanalyse(exp, tmp_path)
    assert res["provenance"] == original
    assert set(res["reanalysed_by"]) == {"version", "commit", "dirty", "python"}

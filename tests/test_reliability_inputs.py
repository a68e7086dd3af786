"""Hostile-but-ordinary input: every bad spec, experiment file, path or lab name is one line naming the
field, exit code 2, no traceback, nothing created. Fuzzed with hypothesis, plus the cases found by hand."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from hpnlab.errors import SpecError
from hpnlab.model.spec import load_spec, parse_spec
from hpnlab.traffic.run import experiment
from tests.conftest import ROOT

HPN = [sys.executable, "-m", "hpnlab.cli"]


def cli(*args, timeout=30, cwd=None):
    return subprocess.run([*HPN, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd or ROOT)


def one_line(r, *needles, code=2):
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code and len(lines) == 1 and lines[0].startswith("hpnlab: error:"), r.stderr[-2000:]
    assert "Traceback" not in r.stderr and len(lines[0]) < 400, lines[0][:500]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# --- specs ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,needle", [
    ("", "the spec is empty"),
    ("{}", "spec field 'name': required"),
    ("segments: 1\n", "spec field 'name': required"),
    ('name: "x\\n"\n', "spec field 'name'"),
    ("name: x\naddressing: {hosts: 127.0.0.0/16}\n", "loopback"),
    ("name: x\naddressing: {hosts: 224.0.0.0/16}\n", "multicast"),
    ("name: x\naddressing: {loopbacks: 169.254.0.0/16}\n", "link-local"),
    ("name: x\naddressing: {hosts: 0.0.0.0/16}\n", "this network"),
    ("name: x\naddressing: {hosts: 240.0.0.0/16}\n", "reserved"),
    ("name: x\nlacp: {system_mac: '00:00:00:00:00:00'}\n", "all zeros"),
    ('name: "00:00:5e:00:01:01\\n"\n', "spec field 'name'"),
    ("name: x\nlacp: {system_mac: \"00:00:5e:00:01:01\\n\"}\n", "lacp.system_mac"),
    ("segments: !!int abc\n", "malformed YAML"),
    ("[" * 5000 + "]" * 5000, "malformed YAML"),
    ("name: x\0\n", "control character"),
    ("name: x\x1b[2J\n", "control character"),
    ("name: " + "a" * 100_000 + "\n", "characters)"),
])
def test_bad_spec_files_are_one_line(tmp_path, text, needle):
    p = tmp_path / "s.yml"
    p.write_text(text)
    one_line(cli("generate", str(p), "--out", str(tmp_path / "out")), needle)
    assert not (tmp_path / "out").exists()


def test_spec_paths_that_are_not_files(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    big = tmp_path / "big.yml"
    big.write_bytes(b"#" * (2 << 20))
    latin = tmp_path / "latin.yml"
    latin.write_bytes(b"name: caf\xe9\n")
    for path, needle in ((fifo, "not a regular file"), ("/dev/zero", "not a regular file"), (loop, "cannot be read"),
                         (tmp_path, "is a directory"), (big, "limit"), (latin, "not UTF-8"),
                         ("/etc/passwd", "top level must be a mapping"), (f"{big}/x", "cannot be read"), ("x" * 5000, "cannot be read")):
        one_line(cli("generate", str(path), "--out", str(tmp_path / "o")), needle)


def test_generate_out_paths(tmp_path):
    (tmp_path / "file").write_text("x")
    one_line(cli("generate", "--out", str(tmp_path / "file")), "not a directory")
    one_line(cli("generate", "--out", "/proc/x"), "--out")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "topology.json").write_text("{}")  # a user's folder that merely holds such a file
    (mine / "notes.txt").write_text("keep me")
    one_line(cli("generate", "--out", str(mine)), "not made by hpnlab")
    assert (mine / "notes.txt").read_text() == "keep me"
    out = tmp_path / "gen"
    assert cli("generate", "--out", str(out)).returncode == 0
    assert cli("generate", "--out", str(out)).returncode == 0  # its own output is replaced


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=4),
                    max_leaves=20))
def test_fuzzed_spec_documents_never_raise_anything_but_spec_error(doc):
    try:
        parse_spec(doc)
    except SpecError as e:
        assert "\n" not in str(e) and len(str(e)) < 1000
    except RecursionError:
        pytest.fail("RecursionError escaped")


KEYS = ["name", "segments", "hosts_per_segment", "rails", "access", "tier2", "aggs_per_plane", "tier3", "asn",
        "addressing", "lacp", "bgp", "bfd", "mechanisms", "host_driver"]


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS),
                       st.one_of(st.integers(-5, 300), st.text(max_size=12), st.booleans(), st.none(),
                                 st.dictionaries(st.text(max_size=10), st.integers(-5, 70000), max_size=3)),
                       max_size=6))
def test_fuzzed_specs_near_the_real_keys(doc):
    try:
        sp = parse_spec({"name": "f", **doc})
    except SpecError as e:
        assert str(e).count("\n") == 0 and "spec field" in str(e) or "spec:" in str(e)
    else:
        assert sp.name.isalnum()


# --- experiments ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("doc,needle", [
    ({"name": "x", "faults": [{"kind": "link-down", "node": "s0h0", "iface": "r0p0", "at": float("nan")}]},
     "finite"),
    ({"name": "x", "faults": [{"kind": "link-down", "node": "s0h0", "iface": "r0p0", "at": 1, "until": float("inf")}]},
     "finite"),
    ({"name": "x", "spec": "."}, "is a directory"),
    ({"name": "x", "spec": "/etc/passwd"}, "not a lab spec"),
    ({"name": "x", "spec": "/dev/zero"}, "not a regular file"),
])
def test_bad_experiment_files_are_one_line(tmp_path, doc, needle):
    p = tmp_path / "e.yml"
    p.write_text(yaml.safe_dump(doc))
    one_line(cli("run", str(p), "--out", str(tmp_path / "o")), needle)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args,needle", [
    (["-n", "0"], "--repetitions 0"), (["-n", "-1"], "--repetitions -1"), (["--duration", "-5"], "--duration -5"),
    (["--duration", "nan"], "--duration nan"), (["--runtime", "bogus"], "argument --runtime: invalid choice: 'bogus'"),
])
def test_run_overrides_are_checked_before_anything_is_created(tmp_path, args, needle):
    one_line(cli("run", "link-failure", "--out", str(tmp_path / "o"), *args), needle)
    assert not (tmp_path / "o").exists()


def test_run_out_must_be_a_directory(tmp_path):
    (tmp_path / "f").write_text("x")
    one_line(cli("run", "link-failure", "--out", str(tmp_path / "f")), "--out")


def test_experiment_api_rejects_the_same_as_the_cli(tmp_path):
    with pytest.raises(SpecError, match="--repetitions"):
        experiment.load(experiment.find("link-failure"), repetitions=0)
    with pytest.raises(SpecError, match="not found"):
        load_spec(tmp_path / "nope.yml")


# --- lab names --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../tmp", "/tmp", ".", "x/y", "A", "a" * 100_000])
@pytest.mark.parametrize("cmd", [["down", "--lab"], ["status", "--lab"], ["verify", "--lab"], ["fail", "--clear", "--lab"]])
def test_lab_names_are_validated_everywhere_they_enter(cmd, name):
    line = one_line(cli(*cmd, name), "lowercase letters and digits")
    assert len(line) < 300  # a 100 KB name is not echoed


def test_exec_takes_lab_after_the_node():
    one_line(cli("exec", "s0h0", "--lab", "../x", "--", "true"), "lowercase letters and digits")


def test_overlapping_fault_windows_are_refused(tmp_path):
    p = tmp_path / "e.yml"
    p.write_text(yaml.safe_dump({"name": "x", "duration": 10, "faults": [
        {"kind": "link-down", "node": "s1h1", "iface": "r0p1", "at": 1, "until": 2},
        {"kind": "link-down", "node": "s0h0", "iface": "r0p0", "at": 2.5, "until": 4}]}))
    one_line(cli("run", str(p), "--out", str(tmp_path / "o")), "faults.1: starts at 2.5 s, within faults.0's window",
             "at >= 4")


def test_loss_after_a_repair_is_charged_to_the_fault_whose_window_it_began_in():
    """A gap that runs from one fault's repair into the next fault is counted once, by the fault it began
    in (the shipped ablations' 'lost after repair' of s1h1 included s0h0's black hole, which began at s0h0's
    fault: that one is s0h0's alone)."""
    from hpnlab.traffic.analysis import measure

    interval = 0.004
    gap = measure.Gap(start=1.0, end=5.0, missing=999, interval=interval)  # silent from 1 s to 5 s
    fl = measure.Flow("s", 0, 2000, 1001, 0, 0, [gap])
    alone = measure.fault_metrics([fl], start=1.0, end=2.0, window_end=10.0)
    assert alone["lost_after_repair_1s"] == pytest.approx(499, abs=2)  # sent in [3 s, 5 s)
    first = measure.fault_metrics([fl], start=1.0, end=2.0, window_end=3.0)  # the next fault starts at 3 s
    assert first["lost_packets"] == 999 and first["resumed"] is False
    assert measure.fault_metrics([fl], start=3.0, end=4.0, window_end=10.0)["lost_packets"] == 0
    nxt = measure.Flow("s", 0, 2000, 1500, 0, 0, [measure.Gap(2.996, 5.0, 500, interval)])  # began at 3 s
    assert measure.fault_metrics([nxt], start=1.0, end=2.0, window_end=3.0)["lost_packets"] == 0
    assert measure.fault_metrics([nxt], start=3.0, end=4.0, window_end=10.0)["lost_packets"] == 500


FAULT = st.fixed_dictionaries({"kind": st.sampled_from(["link-down", "hang", "one-way", "bogus", 3]),
                               "node": st.sampled_from(["s0h0", "s0r0a", "nosuch", None]),
                               "iface": st.sampled_from(["r0p0", "eth9", None, ["r0p0", "r0p1"]]),
                               "at": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3)),
                               "until": st.one_of(st.none(), st.floats(-5, 50))})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.fixed_dictionaries({"name": st.text(max_size=8), "duration": st.one_of(st.floats(), st.integers(-5, 900)),
                              "repetitions": st.integers(-2, 60), "faults": st.lists(FAULT, max_size=3),
                              "probes": st.lists(st.fixed_dictionaries({"name": st.text(max_size=4),
                                                                        "src": st.sampled_from(["s0h0", "s0r0a"]),
                                                                        "dst": st.sampled_from(["s1h0", "s0h0"]),
                                                                        "rate": st.floats()}), max_size=2)}))
def test_fuzzed_experiment_files_never_raise_anything_but_spec_error(tmp_path, doc):
    p = tmp_path / "fuzz.yml"
    p.write_text(yaml.safe_dump(doc, allow_unicode=True))
    try:
        experiment.load(p)
    except SpecError as e:
        assert "\n" not in str(e)


def test_a_key_given_twice_is_one_line(tmp_path):
    p = tmp_path / "dup.yml"
    p.write_text("name: x\nsegments: 1\nlacp: {key: 1}\nsegments: 2\n")
    one_line(cli("generate", str(p), "--out", str(tmp_path / "o")), "key 'segments' given twice (line 4)")
    e = tmp_path / "e.yml"
    e.write_text("name: e\nduration: 5\nduration: 9\n")
    one_line(cli("run", str(e), "--out", str(tmp_path / "r"), "--reanalyse"), "key 'duration' given twice")


@pytest.mark.parametrize("cmd", [["status"], ["verify"], ["fail", "link-down", "s0h0", "r0p0"], ["down"]])
def test_a_lab_that_is_not_running_is_one_line_exit_2_naming_the_running_labs(cmd):
    if os.geteuid() != 0:
        pytest.skip("these commands check for root first")
    r = cli(*cmd, "--lab", "nosuchlab")
    if cmd == ["down"]:  # idempotent: nothing to remove is not an error
        assert r.returncode == 0 and "not running: nothing to do" in r.stderr
        return
    one_line(r, "lab 'nosuchlab' is not running", "(")


def test_forgetting_sudo_is_one_line_exit_2_saying_how(monkeypatch, capsys):
    from hpnlab.cli import main

    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # as a user without root
    for cmd in (["status"], ["up"], ["verify"], ["doctor"]):
        assert main(cmd) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "needs root" in err[0] and f"sudo hpnlab {cmd[0]}" in err[0], err

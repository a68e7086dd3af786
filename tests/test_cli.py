"""CLI contract: generate writes the promised files; bad input exits 2 with one line and leaves nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from hpnlab.cli import main
from tests.conftest import ROOT
from tests.lib.specs import BAD


def test_generate_default(tmp_path, capsys):
    out = tmp_path / "lab"
    assert main(["generate", "--out", str(out)]) == 0
    assert (out / "topology.json").exists() and (out / "hpn.clab.yml").exists()
    assert (out / "s0r0a" / "frr.conf").exists() and (out / "fabric.svg").exists()


def test_calc_json(capsys):
    assert main(["calc", "--json"]) == 0
    assert '"gpus_per_pod": 15360' in capsys.readouterr().out


@pytest.mark.parametrize("data,field", BAD[:24], ids=[f for _, f in BAD[:24]])
def test_bad_spec_exit_2_one_line_nothing_written(tmp_path, capsys, data, field):
    spec = tmp_path / "bad.yml"
    spec.write_text(yaml.safe_dump({"name": "t", **data} if "name" not in data else data))
    out = tmp_path / "out"
    assert main(["generate", str(spec), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and field in err and "Traceback" not in err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yml"]


def test_missing_and_malformed_files(tmp_path, capsys):
    assert main(["generate", str(tmp_path / "none.yml"), "--out", str(tmp_path / "o")]) == 2
    (tmp_path / "m.yml").write_text("segments: {\n")
    assert main(["generate", str(tmp_path / "m.yml"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and "malformed YAML" in err
    assert not (tmp_path / "o").exists()


def test_subprocess_exit_code_and_no_traceback(tmp_path):
    spec = tmp_path / "bad.yml"
    spec.write_text("name: t\nlacp: {port_offsets: {a: 300, b: 300}}\n")
    r = subprocess.run([sys.executable, "-m", "hpnlab.cli", "generate", str(spec), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "port_offsets" in r.stderr
    assert r.stderr.count("\n") == 1

"""state.json and node.json as typed models: every way they can be damaged is one clear line, and lab
names are validated wherever they enter (never a path)."""

from __future__ import annotations

import json

import pytest

from hpnlab.lifecycle import orchestrate
from hpnlab.errors import SpecError, StateError
from hpnlab.model.models import LabState
from hpnlab.runtime import base


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setattr(base, "STATE_ROOT", tmp_path)
    return tmp_path


@pytest.mark.parametrize("text,why", [
    ("{garbage", "is not valid JSON"),
    ("", "is not valid JSON"),
    ("[]", "is damaged"),
    ('{"lab": "x", "netns": "not-a-list"}', "field 'netns'"),
    ('{"lab": "x", "agents": {"s0h0": "12ab"}}', "field 'agents.s0h0'"),
    ('{"lab": "x", "surprise": 1}', "field 'surprise'"),
    ('{"lab": "other"}', "belongs to lab 'other'"),
])
def test_damaged_state_is_one_line_naming_the_fix(root, text, why):
    (root / "x").mkdir()
    (root / "x" / "state.json").write_text(text)
    with pytest.raises(StateError) as e:
        base.State.load("x")
    msg = str(e.value)
    assert why in msg and "'hpnlab down --lab x'" in msg and "\n" not in msg


def test_missing_state_and_round_trip(root):
    with pytest.raises(StateError, match="is missing"):
        base.State.load("y")
    st = base.State("y", LabState(lab="y", netns=["y-s0h0"], agents={"s0h0": 42}))
    st.save()
    assert base.State.load("y").data.agents == {"s0h0": 42} and base.running_labs() == ["y"]


def test_damaged_node_json_is_one_line(root, tmp_path):
    cfg = tmp_path / "cfg"
    (cfg / "s0h0").mkdir(parents=True)
    (cfg / "topology.json").write_text(json.dumps({"nodes": [{"name": "s0h0"}]}))
    (cfg / "s0h0" / "node.json").write_text(json.dumps({"lab": "x", "name": "s0h0", "role": "switch"}))
    with pytest.raises(StateError, match=r"node config .*s0h0/node.json is damaged \(field 'role'"):
        base.load_nodes(cfg)
    (cfg / "topology.json").write_text("{}")
    with pytest.raises(StateError, match="topology.json is damaged"):
        base.load_nodes(cfg)


@pytest.mark.parametrize("name", ["../../etc", "/abs/dir", ".", "", "x\n", "UPPER", "a-b", "x" * 11, "1abc"])
def test_lab_names_are_never_paths(root, name):
    with pytest.raises(SpecError, match="lowercase letters and digits"):
        base.state_dir(name)
    with pytest.raises(SpecError):
        orchestrate.resolve_lab(name)


def test_foreign_folders_under_the_state_root_are_not_labs(root):
    (root / "Not-A-Lab").mkdir()
    (root / "Not-A-Lab" / "state.json").write_text("{}")
    assert base.running_labs() == []

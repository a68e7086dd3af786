"""hpnlab fail: --list lines up, the times it prints, and what --watch reports (against a stand-in lab's agent
status files: no root)."""

from __future__ import annotations

import re
import time

from hpnlab.cli import main
from hpnlab.model.spec import load_spec
from hpnlab.traffic import faults
from hpnlab.traffic.run import faultwatch
from hpnlab.traffic.run.experiment import node_configs


def test_fail_list_columns_start_at_the_same_offset_for_every_kind(capsys):
    assert main(["fail", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == list(faults.KINDS)
    starts = {re.match(r"\S+\s+", ln).end() for ln in lines}
    assert len(starts) == 1 and starts.pop() >= max(map(len, faults.KINDS)) + 2


class _Lab:
    """A running lab as the watch sees it: no namespace to count BGP connections in, the agents' status."""

    def __init__(self):
        self.status: dict[str, dict] = {}

    def netns_path(self, node):
        return None

    def read_status(self, node):
        st = self.status.get(node)
        return None if st is None else {**st, "age": time.time() - st["time"]}


def _tor(routes: int, cd: int, t: float | None = None) -> dict:
    return {"time": t or time.time(), "host_routes": {f"10.0.0.{i}": 1 for i in range(routes)},
            "ports": [{"mux": "collecting_distributing" if i < cd else "waiting"} for i in range(2)]}


def test_watch_reports_each_change_once_then_that_the_lab_is_back():
    cfgs = node_configs(load_spec("default"))
    lab = _Lab()
    for n, c in cfgs.items():
        if c.role == "tor":
            lab.status[n] = _tor(2, 2)
    w = faultwatch.Watch(lab, cfgs)
    assert w.before["host routes s0r0a"] == "2" and w.before["lacp s0r0a"] == "2/2 ports C/D"
    assert w.poll() == [] and w.healed()
    lab.status["s0r0a"] = _tor(1, 1)
    assert w.poll() == ["host routes s0r0a 2 -> 1", "lacp s0r0a 2/2 ports C/D -> 1/2 ports C/D"]
    assert w.poll() == [] and not w.healed()  # a change is said once, not every second
    lab.status["s0r0b"] = _tor(2, 2, t=time.time() - 60)  # a hung agent: its last status is a minute old
    assert w.poll() == ["agent s0r0b ok -> no heartbeat", "host routes s0r0b 2 -> unknown",
                        "lacp s0r0b 2/2 ports C/D -> unknown"]
    lab.status["s0r0a"] = lab.status["s0r0b"] = _tor(2, 2)
    assert len(w.poll()) == 5 and w.healed() and w.left() == []


def test_changes_names_keys_either_side_lacks():
    assert faultwatch.changes({"a": "1", "b": "2"}, {"b": "3", "c": "4"}) == ["a 1 -> -", "b 2 -> 3", "c - -> 4"]

"""The agents' status file (hpnlab.node.agents.agent.StatusFile): what it holds is what status, verify and the
timeline read, however it is written (root-free)."""

from __future__ import annotations

import json
import time

import pytest

from hpnlab.node.agents import agent


@pytest.fixture
def events():
    saved = list(agent.EVENTS)
    agent.EVENTS.clear()
    yield agent.EVENTS
    agent.EVENTS.clear()
    agent.EVENTS.extend(saved)


def test_the_status_file_holds_the_data_the_heartbeat_and_the_last_minutes_events(tmp_path, events):
    st = agent.StatusFile(str(tmp_path / "s.json"))
    now = time.time()
    events.extend([(now - 90, "too old"), (now - 30, "port r0p0 up"), (now - 1, "rail 0: nexthops [] -> [r0p0]")])
    st.write({"node": "s0h0", "nics": [{"rail": 0}]})
    d = json.loads((tmp_path / "s.json").read_text())
    assert d["node"] == "s0h0" and d["nics"] == [{"rail": 0}] and abs(d["time"] - time.time()) < 5
    assert list(d) == ["node", "nics", "pid", "time", "timers_late", "packet_gaps", "events"]  # events last
    assert set(d["packet_gaps"]) == {"long", "open", "packets", "threshold_ms"}  # the slip guard's record
    assert d["events"] == [[now - 30, "port r0p0 up"], [now - 1, "rail 0: nexthops [] -> [r0p0]"]]
    assert not (tmp_path / "s.tmp").exists()  # written aside, then renamed over


def test_the_events_are_serialized_again_when_one_comes_or_one_ages_out(tmp_path, events):
    """The events' JSON is reused between writes only while it is the same list."""
    st = agent.StatusFile(str(tmp_path / "s.json"))
    t = 1_000_000.0
    events.extend([(t, "a"), (t + 1, "b")])
    first = st.events_json(t + 2)
    assert json.loads(first) == [[t, "a"], [t + 1, "b"]]
    assert st.events_json(t + 3) is first  # nothing new, nothing aged out: the same string
    events.append((t + 4, "c"))
    assert json.loads(st.events_json(t + 4)) == [[t, "a"], [t + 1, "b"], [t + 4, "c"]]
    assert json.loads(st.events_json(t + agent.EVENTS_S + 0.5)) == [[t + 1, "b"], [t + 4, "c"]]  # a aged out
    assert json.loads(st.events_json(t + agent.EVENTS_S + 10)) == []
    events.append((t + agent.EVENTS_S + 11, "d"))
    assert json.loads(st.events_json(t + agent.EVENTS_S + 11)) == [[t + agent.EVENTS_S + 11, "d"]]

"""bench/gray_prober.py's fault-free case: its figures are the case's own, not the prober's later events."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gray_prober_bench", ROOT / "bench" / "gray_prober.py")
gray_prober = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gray_prober)


class FakeProber:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self.stats = {"probes": 10}

    def confirmed(self) -> list[dict]:
        return [e for e in self.events if e["event"] == "confirmed"]

    def report(self) -> dict:
        return self.stats


class FakeIsolator:
    def __init__(self) -> None:
        self.log: list[dict] = []


def test_fault_free_events_are_not_the_probers_live_list():
    prober, iso = FakeProber(), FakeIsolator()
    prober.events.append({"t": 1.0, "event": "suspected", "link": "a>b"})
    ff = gray_prober.fault_free_case(prober, iso, 300.04, 0)
    # the next case's confirmations land in the prober's list after the fault-free case ended
    prober.events.extend({"t": 2.0 + i, "event": "confirmed", "link": "s0r0a>agg0-0"} for i in range(4))
    prober.events[0]["event"] = "changed"
    prober.stats["probes"] = 99
    iso.log.append({"action": "isolated s0r0a>agg0-0"})
    assert ff["events"] == [{"t": 1.0, "event": "suspected", "link": "a>b"}]
    assert ff["confirmed"] == 0 and ff["suspected"] == 1 and ff["isolations"] == 0
    assert ff["report"] == {"probes": 10}
    assert ff["seconds"] == 300.0

"""The health wait (orchestrate.wait_healthy) on fake stages, without root: what it asks again, what it
re-checks before saying healthy, how long it pauses between polls, and that it closes what it kept open."""

from __future__ import annotations

import pytest

from hpnlab.lifecycle import orchestrate, verify


class Script:
    """Fake verify stages: each poll of a stage returns its next scripted verdict (the last one repeats)."""

    def __init__(self, verdicts: dict[str, list[bool]], cost: float = 0.0):
        self.verdicts = verdicts
        self.calls: list[str] = []
        self.cost = cost
        self.memos: list[verify.PollMemo] = []

    def stage(self, name: str):
        def fn(rt, cfgs, memo=None):
            self.calls.append(name)
            if memo is not None:
                self.memos.append(memo)
            seq = self.verdicts[name]
            ok = seq.pop(0) if len(seq) > 1 else seq[0]
            return [{"name": f"{name} x", "ok": ok, "detail": "scripted"}]
        return fn


@pytest.fixture
def fake(monkeypatch):
    def make(verdicts, took=0.0):
        s = Script(verdicts)
        monkeypatch.setattr(verify, "STAGES", [(n, s.stage(n)) for n in verdicts])
        monkeypatch.setattr(verify, "check_bgp", verify.STAGES[[n for n in verdicts].index("bgp")][1]
                            if "bgp" in verdicts else verify.check_bgp)
        clock = {"t": 0.0}
        monkeypatch.setattr(orchestrate.time, "monotonic", lambda: clock["t"])
        s.sleeps = []

        def sleep(d):
            s.sleeps.append(d)
            clock["t"] += d
        monkeypatch.setattr(orchestrate.time, "sleep", sleep)
        real_run = verify.run_stages

        def timed(*a, **kw):  # each poll costs `took` seconds of the clock
            clock["t"] += took
            return real_run(*a, **kw)
        monkeypatch.setattr(verify, "run_stages", timed)
        return s
    return make


def test_passed_stages_are_not_polled_again_but_rechecked_before_healthy(fake):
    s = fake({"config": [True], "bgp": [False, False, True], "reach": [False, True]})
    checks = orchestrate.wait_healthy(None, {}, timeout=60, progress=lambda m: None)
    assert all(c["ok"] for c in checks) and [c["name"] for c in checks] == ["config x", "bgp x", "reach x"]
    # config once while bgp converges, bgp until it passes, reach until it passes; then config and bgp again
    assert s.calls == ["config", "bgp", "bgp", "bgp", "reach", "reach", "config", "bgp"]


def test_a_regression_at_the_recheck_polls_every_stage_again(fake):
    s = fake({"config": [True, False, True], "reach": [False, True]})
    checks = orchestrate.wait_healthy(None, {}, timeout=60, progress=lambda m: None)
    assert all(c["ok"] for c in checks)
    assert s.calls == ["config", "reach", "reach", "config", "config", "reach"]


@pytest.mark.parametrize("took, pause", [(0.001, orchestrate.POLL_MIN_S), (0.1, 0.2), (1.0, orchestrate.POLL_MAX_S)])
def test_pause_between_polls_grows_with_their_cost(fake, took, pause):
    s = fake({"bgp": [False, False, False, True]}, took=took)
    orchestrate.wait_healthy(None, {}, timeout=60, progress=lambda m: None)
    assert s.sleeps == [pytest.approx(pause)] * 3


def test_the_poll_memo_is_one_per_wait_and_closed_at_the_end(fake, monkeypatch):
    closed = []
    monkeypatch.setattr(verify.PollMemo, "close", lambda self: closed.append(self))
    s = fake({"bgp": [False, True]})
    orchestrate.wait_healthy(None, {}, timeout=60, progress=lambda m: None)
    assert len({id(m) for m in s.memos}) == 1 and closed == [s.memos[0]]
    closed.clear()
    s = fake({"bgp": [False]})  # never healthy: the deadline's verdict, and still closed
    checks = orchestrate.wait_healthy(None, {}, timeout=1, progress=lambda m: None)
    assert not all(c["ok"] for c in checks) and closed == [s.memos[0]]


def _costly(monkeypatch, costs: dict[str, float], verdicts: dict[str, bool]) -> dict:
    """Stages that each take `costs[name]` seconds of a fake clock and always return `verdicts[name]`."""
    clock = {"t": 0.0}
    monkeypatch.setattr(orchestrate.time, "monotonic", lambda: clock["t"])  # time is one module: verify's too
    monkeypatch.setattr(orchestrate.time, "sleep", lambda d: clock.__setitem__("t", clock["t"] + d))

    def stage(name):
        def fn(rt, cfgs, memo=None):
            clock["t"] += costs[name]
            return [{"name": f"{name} x", "ok": verdicts[name], "detail": "scripted"}]
        return fn
    monkeypatch.setattr(verify, "STAGES", [(n, stage(n)) for n in costs])
    monkeypatch.setattr(verify, "check_bgp", verify.STAGES[0][1])
    return clock


def test_the_timeout_is_a_bound_no_stage_starts_after_it_and_no_full_verify_follows(monkeypatch):
    """Past the deadline the wait returns the last poll's checks: its bound is the timeout plus one stage
    (a full verify after it cost as much again on a loaded segment: 651 s for a 400 s timeout)."""
    clock = _costly(monkeypatch, {"config": 0.4, "bgp": 0.4, "reach": 0.4},
                    {"config": True, "bgp": False, "reach": True})
    checks = orchestrate.wait_healthy(None, {}, timeout=1.0, progress=lambda m: None)
    assert clock["t"] <= 1.0 + 0.4 + 1e-9, clock
    assert not verify.complete(checks)
    deadline = [c for c in checks if c["name"] == "deadline"]
    assert deadline and "reach" in deadline[0]["detail"] and not deadline[0]["ok"], checks


def test_a_lab_whose_checks_all_passed_but_not_all_ran_by_the_deadline_is_not_healthy(monkeypatch):
    clock = _costly(monkeypatch, {"config": 1.2, "bgp": 0.1, "reach": 0.1},
                    {"config": True, "bgp": True, "reach": True})
    checks = orchestrate.wait_healthy(None, {}, timeout=1.0, progress=lambda m: None)
    assert clock["t"] == pytest.approx(1.2)
    assert [c["name"] for c in checks] == ["config x", "deadline"] and not verify.complete(checks)
    assert "bgp, reach" in checks[-1]["detail"]

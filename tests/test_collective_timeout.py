"""The all-reduce's collective timeout without a lab: the watchdog, the node program on loopback (a rank
stopped with SIGSTOP blocks the ring, as a failed cable does) and how a dead job's figures are reported."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from hpnlab.node.programs.allreduce import Watchdog
from hpnlab.traffic.output import report
from hpnlab.traffic.workloads import allreduce

RANKS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]  # loopback answers every 127/8 address, no root needed


def test_watchdog_fires_only_past_its_timeout_and_never_without_one():
    w = Watchdog(3.0)
    w.begin(100.0)
    assert w.expired(102.9) is None and w.expired(103.0) is None
    assert abs(w.expired(103.2) - 3.2) < 1e-9
    w.begin(103.2)  # the next operation began: its own clock
    assert w.expired(106.0) is None
    forever = Watchdog(None)
    forever.begin(0.0)
    assert forever.expired(1e6) is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ring(tmp_path: Path, duration: float, stop_after: float, stop_for: float, timeout: float | None) -> list[dict]:
    """Three ranks on loopback for ``duration`` s; rank 2 is stopped (SIGSTOP) ``stop_after`` s in for
    ``stop_for`` s. Returns the ranks' reports and the stop's wall-clock time in each."""
    port, start = _free_port(), time.time() + 4  # slack for three interpreters to start on a busy machine
    procs = []
    for rank in range(len(RANKS)):
        argv = [sys.executable, "-m", "hpnlab.node.programs.allreduce", "--rank", str(rank), "--addrs", ",".join(RANKS),
                "--port", str(port), "--size", str(256 * 1024), "--conns", "2", "--duration", f"{duration:g}",
                "--start-at", f"{start:.3f}", "--out", str(tmp_path / f"r{rank}.json")]
        procs.append(subprocess.Popen(argv + (["--timeout", f"{timeout:g}"] if timeout else [])))
    try:
        time.sleep(max(0.0, start + stop_after - time.time()))
        stopped = time.time()
        procs[2].send_signal(signal.SIGSTOP)
        time.sleep(stop_for)
        procs[2].send_signal(signal.SIGCONT)
        for p in procs:
            assert p.wait(timeout=duration + 20) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
    reps = [json.loads((tmp_path / f"r{k}.json").read_text()) for k in range(len(RANKS))]
    for r in reps:
        r["stopped"] = stopped
        assert r["start"] < stopped and r["iterations"], f"rank {r['rank']} had not started its ring by the stop"
    return reps


def test_a_rank_blocked_past_the_timeout_aborts_and_the_job_is_dead(tmp_path):
    reps = _ring(tmp_path, duration=5, stop_after=1.0, stop_for=2.5, timeout=1.0)
    stopped = reps[0]["stopped"]
    for r in reps[:2]:  # the two ranks left running: blocked by the stopped one, past their timeout
        a = r["aborted"]
        assert a and r["timeout_s"] == 1.0 and a["blocked_s"] >= 1.0, r  # rounded to ms
        assert stopped + 0.5 < a["at"] < stopped + 3.0, (a, stopped)  # about 1 s after its last iteration began
        assert r["iterations"] and max(r["iterations"]) < a["at"]  # ran before, nothing after
    # the stopped rank, resumed, finds its own operation blocked for longer than the timeout and aborts too
    # (it may first finish the step whose data was in its socket already, if that ended an iteration)
    assert reps[2]["aborted"]["blocked_s"] >= 1.0 and reps[2]["aborted"]["at"] > stopped + 2.5
    w = allreduce.deaths(reps)
    assert w["died"] == w["deaths"][0] and w["died"]["at"] == min(r["aborted"]["at"] for r in reps)
    assert [d["rank"] for d in w["deaths"]] == sorted((r["rank"] for r in reps), key=lambda k: reps[k]["aborted"]["at"])


def test_without_a_timeout_the_ring_waits_out_the_same_stop(tmp_path):
    """The default is unchanged: no abort, and the ring runs again after the stopped rank resumes."""
    reps = _ring(tmp_path, duration=4.5, stop_after=1.0, stop_for=1.5, timeout=None)
    for r in reps:
        assert r["aborted"] is None and r["timeout_s"] is None
        after = [t for t in r["iterations"] if t > r["stopped"] + 1.5]
        assert len(after) >= 5, (r["rank"], len(after))
    assert allreduce.deaths(reps) == {"deaths": [], "died": None}


# --- how a dead job is reported ----------------------------------------------------------------------------
def _w(its: list[float], died: float | None) -> dict:
    return {"kind": "allreduce", "iterations": its, "timeout_s": 3.0,
            "died": {"rank": 1, "at": died, "blocked_s": 3.01} if died is not None else None}


T0 = 1000.0
BEFORE = [T0 + 0.5 + k * 0.05 for k in range(30)]  # 20 iterations/s until 2.0 s, the fault


def test_a_job_dead_before_the_repair_is_dead_not_slow():
    kind = allreduce.AllReduce()
    w = _w(BEFORE, died=T0 + 5.0)  # fault at 2 s, died at 5 s, repair at 6 s
    win = kind.window(w, T0, T0 + 2.0, T0 + 2.0, T0 + 6.0)
    assert win["throughput_pct"] == 0 and win["died_ms"] == 3000 and win["longest_halt_ms"] == 3000
    rec = kind.recovery(w, T0, T0 + 2.0, T0 + 6.0, T0 + 12.0)
    assert rec["dead"] and rec["recovered"] is False and rec["recovery_ms"] is None
    assert rec["died_after_repair_ms"] == -1000


def test_a_job_back_before_it_died_is_back_and_one_that_never_died_is_unchanged():
    kind = allreduce.AllReduce()
    after = [T0 + 3.0 + k * 0.05 for k in range(60)]  # back at 3 s (repair at 2.5 s), runs to 6 s
    alive = kind.recovery(_w(BEFORE + after, None), T0, T0 + 2.0, T0 + 2.5, T0 + 9.0)
    assert alive["recovered"] and alive["recovery_ms"] == 500 and "dead" not in alive
    late = kind.recovery(_w(BEFORE + after, T0 + 8.5), T0, T0 + 2.0, T0 + 2.5, T0 + 9.0)
    assert late == alive  # it died 2.5 s after it was back: not this fault's doing


def test_summary_says_dead_not_not_back_and_names_the_rank():
    kind = allreduce.AllReduce()
    runs = []
    for died in (T0 + 5.0, None, T0 + 5.1):
        w = _w(BEFORE + ([T0 + 3.0 + k * 0.05 for k in range(100)] if died is None else []), died)
        wl = {**kind.window(w, T0, T0 + 2.0, T0 + 2.0, T0 + 2.5), **kind.recovery(w, T0, T0 + 2.0, T0 + 2.5, T0 + 12)}
        runs.append({"t0": T0, "workload": {k: v for k, v in w.items() if k != "iterations"},
                     "faults": [{"fault": "link-down s0h0:r0p0+r0p1", "kind": "link-down", "at": 2, "until": 2.5,
                                 "recovered": True, "streams": {}, "workload": wl}]})
    f = report.aggregate(runs)[0]
    wl = f["workload"]
    assert wl["dead_runs"] == 2 and wl["recovered_runs"] == 1 and wl["judged"] == 3
    assert wl["recovery_ms"]["n"] == 1 and wl["died_ms"]["n"] == 0  # died after the fault's window (2.5 s)
    assert wl["died_after_repair_ms"] == {"n": 2, "min": 2500.0, "median": 2550.0, "max": 2600.0}
    row = report._fault_row(f, f, "single-tor", "all", 3)
    assert row[report.COLUMNS.index(("workload back ms", "workload.recovery_ms"))] == "DEAD 2/3, 500"
    line = report.death_lines({"variants": {"single-tor": {"runs": runs}}})[0]
    assert "timeout 3 s, the job died in 2 of 3" in line and "rank 1 blocked 3.01 s" in line, line
    assert "2 ran to the end" in line and "1 died at 5.00 s" in line, line
    assert "3 died at 5.10 s (rank 1 blocked 3.01 s, 2600 ms after the repair of link-down" in line, line

"""The command workload without a lab: its argv template per rank, its validation (one line naming the
field), the per-iteration parser, how a rank's end is classified, and the node-side wrapper
(hpnlab.node.programs.command) running real programs on this machine: stopped at its time, SIGKILL for one that
ignores SIGTERM, its process group's stragglers gone, a crash kept as a result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpnlab.errors import SpecError
from hpnlab.traffic import workloads
from hpnlab.traffic.run import experiment
from hpnlab.traffic.workloads import command

ARGV = ["{python}", "job.py", "--rank={rank}", "--world", "{world}", "--master", "{master}:{port}", "--if",
        "{iface}", "--rail", "{rail}", "--me", "{addr}@{host}", "--local", "{local_rank}"]


def _load(tmp_path: Path, workload: dict, **top):
    p = tmp_path / "c.yml"
    p.write_text(json.dumps({"name": "c", "duration": 5, "workload": workload, **top}))
    return experiment.load(p)


def test_argv_is_filled_in_per_rank_with_the_same_figures_in_the_environment(tmp_path):
    exp = _load(tmp_path, {"kind": "command", "argv": ARGV, "hosts": ["s1h0", "s0h0", "s0h1"], "port": 29600,
                           "env": {"JOB_TAG": "r{rank}-of-{world}"}})
    plan = exp.plans[0]
    assert plan.source == tmp_path / "c.yml"
    procs = workloads.get("command").launch(plan, Path("/tmp/x"), 1000.0, 10.0)
    assert [p["node"] for p in procs] == ["s1h0", "s0h0", "s0h1"]
    master = plan.host_ip("s1h0", 0)
    for rank, p in enumerate(procs):
        argv = p["argv"]
        prog = argv[argv.index("--") + 1:]
        ip = plan.host_ip(p["node"], 0)
        assert prog == [sys.executable, "job.py", f"--rank={rank}", "--world", "3", "--master", f"{master}:29600",
                        "--if", "r0p0", "--rail", "0", "--me", f"{ip}@{p['node']}", "--local", "0"]
        env = dict(a.removeprefix("--env=").split("=", 1) for a in argv[:argv.index("--")] if a.startswith("--env="))
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "3" and env["MASTER_ADDR"] == master
        assert env["MASTER_PORT"] == "29600" and env["GLOO_SOCKET_IFNAME"] == "r0p0" and env["LOCAL_RANK"] == "0"
        assert env["JOB_TAG"] == f"r{rank}-of-3" and env["PYTHONUNBUFFERED"] == "1"
        # the wrapper starts it at t0 (no warmup) and stops it at the window's end
        assert argv[argv.index("--start-at") + 1] == "1000.000" and argv[argv.index("--stop-at") + 1] == "1010.000"
        assert p["out"] == f"/tmp/x/command-{rank}.json"


def test_two_ranks_on_one_host_get_local_ranks_and_warmup_starts_them_early(tmp_path):
    exp = _load(tmp_path, {"kind": "command", "argv": ["prog", "{local_rank}", "{{literal}}", "{rank:03d}"],
                           "hosts": ["s0h0", "s0h0"], "warmup": 6})
    kind = workloads.get("command")
    plan = exp.plans[0]
    assert kind.lead(plan.workload) == 6
    procs = kind.launch(plan, Path("/tmp/x"), 1000.0, 10.0)
    assert [p["argv"][-3:] for p in procs] == [["0", "{literal}", "000"], ["1", "{literal}", "001"]]
    assert procs[0]["argv"][procs[0]["argv"].index("--start-at") + 1] == "994.000"
    env = [a for a in procs[1]["argv"] if a.startswith("--env=LOCAL_WORLD_SIZE=")]
    assert env == ["--env=LOCAL_WORLD_SIZE=2"]


def test_iface_is_the_bond_under_the_kernel_driver(tmp_path):
    plan = _load(tmp_path, {"kind": "command", "argv": ["p", "{iface}"], "rail": 1}).plans[0]
    plan.host_driver = "bond"
    assert {p["argv"][-1] for p in workloads.get("command").launch(plan, Path("/x"), 1.0, 5.0)} == {"bond1"}
    plan.host_driver = "userspace"
    assert {p["argv"][-1] for p in workloads.get("command").launch(plan, Path("/x"), 1.0, 5.0)} == {"r1p0"}


@pytest.mark.parametrize("workload,field,says", [
    ({"argv": ["prog", "{gpu}"]}, "workload.argv", "argv[1]: unknown placeholder {gpu}"),
    ({"argv": ["prog", "{rank"]}, "workload.argv", "argv[1]:"),
    ({"argv": ["{master.x}"]}, "workload.argv", "unknown placeholder {master.x}"),
    ({"argv": ["{rank:q}"]}, "workload.argv", "cannot be filled in"),
    ({"argv": []}, "workload.argv", "at least 1"),
    ({"argv": ["  "]}, "workload.argv", "the program is empty"),
    ({}, "workload.argv", "Field required"),
    ({"argv": ["p"], "env": {"A B": "x"}}, "workload.env", "not an environment variable name"),
    ({"argv": ["p"], "env": {"X": "{nope}"}}, "workload.env", "env.X: unknown placeholder {nope}"),
    ({"argv": ["p"], "hosts": ["s0h0"], "report_rank": 1}, "workload", "report_rank: 1 is not a rank of 1"),
    ({"argv": ["p"], "hosts": []}, "workload", "hosts: give at least one host"),
    ({"argv": ["p"], "port": 80}, "workload.port", "greater than or equal to 1024"),
    ({"argv": ["p"], "grace": 30}, "workload.grace", "less than or equal to 15"),
    ({"argv": ["p"], "shell": "x"}, "workload.shell", "not a key of workload kind 'command'"),
])
def test_validation_errors_are_one_line_naming_the_field(tmp_path, workload, field, says):
    with pytest.raises(SpecError) as e:
        _load(tmp_path, {"kind": "command", **workload})
    msg = str(e.value)
    assert f"'{field}" in msg and says in msg and "\n" not in msg, msg


@pytest.mark.parametrize("workload,says", [
    ({"argv": ["p"], "hosts": ["s0h0", "s9h9"]}, "workload.hosts: 's9h9' is not a host of this lab"),
    ({"argv": ["p"], "rail": 5}, "has no rail 5"),
    ({"argv": ["p"], "report_rank": 4}, "workload.report_rank: 4 is not a rank of 4"),
    ({"argv": ["p"], "congestion": "bbr"}, "workload.congestion: a command workload's sockets are its program's"),
])
def test_hosts_rails_and_ranks_are_checked_against_the_lab(tmp_path, workload, says):
    with pytest.raises(SpecError) as e:
        _load(tmp_path, {"kind": "command", **workload})
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_an_unknown_placeholder_exits_2_on_the_command_line_with_one_line(tmp_path):
    p = tmp_path / "bad.yml"
    p.write_text("name: bad\nworkload: {kind: command, argv: [prog, '{gpus}']}\n")
    r = subprocess.run([sys.executable, "-m", "hpnlab.cli", "run", str(p), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "unknown placeholder {gpus}" in r.stderr and not (tmp_path / "o" / "results.json").exists()


def test_the_per_iteration_parser_takes_only_contract_lines():
    text = "\n".join([
        '{"t": 1700000000.5, "dur": 0.025}',
        "loading model...",
        '{"t": 1700000000.53, "dur": 0.03, "loss": 2.1}',  # more keys are fine
        '{"t": "soon", "dur": 0.03}',
        '{"t": 1700000000.6}',
        '{"t": true, "dur": 0.1}',
        '{"t": 1700000000.7, "dur": -1}',
        "[1, 2]",
        "",
        '{"t": 1700000000.8, "du',  # cut off by a kill
    ])
    its, other = command.parse_iterations(text)
    assert its == [(1700000000.5, 0.025), (1700000000.53, 0.03)] and other == 7


@pytest.mark.parametrize("rep,status", [
    ({"exit_code": 0, "stopped": True}, "stopped"),
    ({"exit_code": -9, "stopped": True, "killed": True}, "killed"),
    ({"exit_code": 0, "stopped": False}, "finished"),
    ({"exit_code": 3, "stopped": False}, "crashed"),
    ({"exit_code": -11, "stopped": False}, "crashed"),
    ({"exit_code": None, "error": "cannot start"}, "not started"),
])
def test_how_a_rank_ended(rep, status):
    assert command.status_of(rep) == status


def _result_of(tmp_path: Path, reports: dict[int, dict], stdouts: dict[int, str], hosts=("s0h0", "s0h1", "s1h0")):
    plan = _load(tmp_path, {"kind": "command", "argv": ["p"], "hosts": list(hosts)}).plans[0]
    run = tmp_path / "rep1"
    run.mkdir()
    for rank, rep in reports.items():
        (run / f"command-{rank}.json").write_text(json.dumps({"rank": rank, **rep}))
    for rank, out in stdouts.items():
        (run / f"command-{rank}.stdout").write_text(out)
    (run / "command-2.stderr").write_text("warming up\nTraceback (most recent call last):\nValueError: boom\n")
    return workloads.get("command").result(plan, run)


def test_result_uses_the_report_ranks_iterations_and_keeps_a_crash_as_a_result(tmp_path):
    t = 1700000000.0
    # 10 iterations/s for 2 s, one at 2.5 s, then none until 4.1 s: a stall in a fault from 2.05 s to 4 s
    marks = [t + 0.1 * k for k in range(1, 21)] + [t + 2.5] + [t + 4 + 0.1 * k for k in range(1, 10)]
    lines = "".join(json.dumps({"t": m, "dur": 0.1}) + "\n" for m in marks)
    w = _result_of(tmp_path, {0: {"exit_code": 0, "stopped": True}, 1: {"exit_code": -9, "stopped": True,
                                                                       "killed": True},
                              2: {"exit_code": 1, "stopped": False}},
                   {0: lines, 1: lines[: len(lines) // 2], 2: "x\n"})
    assert w["kind"] == "command" and w["world"] == 3 and len(w["iterations"]) == 30 and w["iteration_ms"] == 100
    assert [r["status"] for r in w["ranks"]] == ["stopped", "killed", "crashed"] and w["crashed"] == [2]
    assert w["ranks"][2]["stderr_tail"][-1] == "ValueError: boom" and w["ranks"][2]["exit_code"] == 1
    assert "stderr_tail" not in w["ranks"][0]
    # the all-reduce's analysis of the same marks: 10 iterations/s before, one in the fault's 1.95 s
    kind = workloads.get("command")
    win = kind.window(w, t, t + 2, t + 2.05, t + 4)
    assert win["baseline_rate"] == 10.0 and win["longest_halt_ms"] == pytest.approx(1500, abs=1)
    assert win["throughput_pct"] == pytest.approx(100 * (1 / 1.95) / 10, abs=0.1)
    assert kind.recovery(w, t, t + 2, t + 4, t + 5)["recovery_ms"] == pytest.approx(0, abs=1)
    assert kind.rate_series(w, t)[0] == (0.125, 8.0)


def test_a_rank_without_a_report_is_not_started_and_says_so(tmp_path):
    w = _result_of(tmp_path, {0: {"exit_code": 0, "stopped": True}}, {0: ""}, hosts=("s0h0", "s0h1"))
    assert w["ranks"][1]["status"] == "not started" and "no report" in w["ranks"][1]["error"]
    assert w["iterations"] == [] and w["iteration_ms"] is None


def test_aggregate_counts_stalls_and_crashes_and_summary_names_the_rank():
    kind = workloads.get("command")

    def run(halt_ms, crashed=False):
        ranks = [{"rank": 0, "host": "s0h0", "status": "stopped", "exit_code": 0}]
        if crashed:
            ranks.append({"rank": 1, "host": "s1h0", "status": "crashed", "exit_code": 3, "stderr_tail": ["oops"]})
        return {"workload": {"ranks": ranks},
                "faults": [{"applied_s": 2.0, "reverted_s": 6.0, "workload": {"longest_halt_ms": halt_ms}}]}

    agg = kind.aggregate([run(4000), run(110), run(3700, crashed=True)])["command"]
    assert agg["stalled"] == [1, 3] and agg["stalled_runs"] == 2 and agg["crashed_runs"] == 1
    lines = kind.summary_lines("dual-tor", {"command": agg})
    assert "stalled (halted for >= 90% of a fault) in 2 of 3 repetitions (1, 3); a rank crashed in 1" in lines[0]
    assert lines[1].strip() == "repetition 3 rank 1 on s1h0: crashed, exit 3: oops"


# --- the node-side wrapper, on this machine (no namespace needed) ---------------------------------------------
def _wrap(tmp_path: Path, prog: list[str], start_in: float, stop_in: float, grace: float = 1.0, env=()) -> dict:
    now = time.time()
    out = tmp_path / "r.json"
    subprocess.run([sys.executable, "-m", "hpnlab.node.programs.command", "--rank", "0", "--start-at", f"{now + start_in:.3f}",
                    "--stop-at", f"{now + stop_in:.3f}", "--grace", str(grace), "--stdout", str(tmp_path / "r.out"),
                    "--stderr", str(tmp_path / "r.err"), "--out", str(out), *(f"--env={e}" for e in env), "--", *prog],
                   check=True, timeout=60)
    return json.loads(out.read_text())


def test_wrapper_stops_the_program_at_its_time_and_keeps_its_output(tmp_path):
    prog = [sys.executable, "-c", "import json,os,time\nprint(os.environ['HELLO'], flush=True)\n"
            "while True:\n print(json.dumps({'t': time.time(), 'dur': 0.05}), flush=True); time.sleep(0.05)"]
    # generous times: a Python start takes seconds on a loaded 2-core machine
    before = time.time()
    rep = _wrap(tmp_path, prog, 1.0, 6.0, env=["HELLO=from {rank}"])
    assert rep["stopped"] and not rep["killed"] and rep["exit_code"] == -15, rep
    assert rep["started"] >= before + 1.0 and rep["ended"] >= before + 6.0  # at its times, not at once
    its, other = command.parse_iterations((tmp_path / "r.out").read_text())
    assert other == 1 and 1 <= len(its) <= 5.0 / 0.05 + 1 and (tmp_path / "r.out").read_text().startswith("from {rank}\n")
    assert all(rep["started"] <= t <= rep["ended"] for t, _d in its)


def test_wrapper_kills_a_program_that_ignores_sigterm_and_its_group(tmp_path):
    marker = tmp_path / "child.pid"
    prog = [sys.executable, "-c",
            "import signal,subprocess,sys,time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            f"c = subprocess.Popen([sys.executable, '-c', 'import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
            f"open({str(marker)!r}, 'w').write(str(c.pid))\ntime.sleep(60)"]
    rep = _wrap(tmp_path, prog, 0.0, 10.0, grace=0.5)  # 10 s: time to start both and ignore SIGTERM
    child = int(marker.read_text())  # written after both ignore SIGTERM
    assert rep["stopped"] and rep["killed"] and rep["exit_code"] == -9, rep
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:  # reaped by init: poll, no sleep guess
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split(")")[-1][:3]


def test_wrapper_reports_a_crash_and_a_missing_program_and_exits_0(tmp_path):
    rep = _wrap(tmp_path, [sys.executable, "-c", "import sys; print('dying', file=sys.stderr); sys.exit(3)"], 0, 5)
    assert rep["exit_code"] == 3 and not rep["stopped"] and command.status_of(rep) == "crashed"
    assert rep["ended"] - rep["started"] < 4  # it did not wait for the window's end
    assert (tmp_path / "r.err").read_text() == "dying\n"
    rep = _wrap(tmp_path, [str(tmp_path / "no-such-program")], 0, 5)
    assert rep["exit_code"] is None and "cannot start" in rep["error"] and command.status_of(rep) == "not started"


def test_wrapper_never_uses_a_shell(tmp_path):
    rep = _wrap(tmp_path, ["echo", "$HOME; touch", str(tmp_path / "pwned")], 0, 5)
    assert rep["exit_code"] == 0 and not (tmp_path / "pwned").exists()
    assert (tmp_path / "r.out").read_text() == f"$HOME; touch {tmp_path / 'pwned'}\n"
    assert os.path.basename(rep["argv"][0]) == "echo"

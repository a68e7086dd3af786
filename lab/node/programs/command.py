"""One rank of a ``command`` workload: a user's own program (argv as given, never through a shell), started
in this node at a common wall-clock time and stopped at the end of the run's window.

The program runs in a process group of its own (a new session), so what it starts is stopped with it: at
``--stop-at`` the group gets SIGTERM, and after ``--grace`` seconds whatever is left of it SIGKILL. Its
stdout and stderr go to files of their own (the per-iteration lines are read from stdout afterwards, by the
workload's analysis on the controller). The report says how the program ended: its exit code (negative: the
signal that ended it), whether the run's end stopped it or it exited by itself (a crash is a result, not an
error: this wrapper exits 0 either way) and whether it needed SIGKILL.

A SIGTERM to this wrapper (the run interrupted) stops the program's group the same way, and the report is
still written.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from hpnlab.node.reports import StopFlag, write_json

POLL_S = 0.05
STRAGGLERS_S = 1.0  # what a program left in its group has this long after SIGTERM (the runner waits 20 s in all)


def signal_group(pgid: int, sig: int) -> bool:
    """``sig`` to every process of the group this wrapper created; False when none is left. The group's
    ID stays the leader's PID while any member lives, even after the leader was reaped, so it cannot name
    another process's group."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False


def group_alive(pgid: int) -> bool:
    return signal_group(pgid, 0)


def default_congestion() -> str | None:
    """The TCP congestion control this namespace gives a socket that does not choose one: what the
    program's connections run, unless it sets its own."""
    try:
        with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
            return f.read().strip() or None
    except OSError:
        return None


def run(argv: list[str], env: dict[str, str], start_at: float, stop_at: float, grace: float, stdout: str,
        stderr: str, stop: StopFlag) -> dict:
    while (d := start_at - time.time()) > 0 and not stop.flag:
        time.sleep(min(d, 0.2))
    rep: dict = {"argv": argv, "exit_code": None, "stopped": False, "killed": False, "error": None}
    if stop.flag:
        return {**rep, "error": "interrupted before it started"}
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        try:
            p = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env={**os.environ, **env},
                                 start_new_session=True)
        except OSError as e:  # not found, not executable: the rank never ran, and the report says why
            return {**rep, "error": f"cannot start {argv[0]}: {e.strerror or e}"}
    rep.update(pid=p.pid, started=time.time())
    while p.poll() is None and (now := time.time()) < stop_at and not stop.flag:
        time.sleep(min(POLL_S, max(0.001, stop_at - now)))  # wake at the window's end itself, not after it
    if p.poll() is not None and time.time() >= stop_at:
        # it ended between the last look (before the window's end) and now (after it): with its peers
        # stopping, as a rank whose peer went first does (a reset connection), not a crash of its own
        rep.update(stopped=True, ended_with_peers=True)
    if p.poll() is None:  # the window's end (or this wrapper told to stop): the whole group, gently first
        rep["stopped"] = True
        signal_group(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            rep["killed"] = True
            signal_group(p.pid, signal.SIGKILL)
            p.wait()
    rep.update(ended=time.time(), exit_code=p.returncode)
    # what the program left running in its group (a helper it started) goes too: TERM, then KILL
    if signal_group(p.pid, signal.SIGTERM):
        deadline = time.monotonic() + min(grace, STRAGGLERS_S)
        while group_alive(p.pid) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        rep["stragglers_killed"] = signal_group(p.pid, signal.SIGKILL)
    return rep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hpnlab.node.programs.command", description=__doc__.splitlines()[0])
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--start-at", type=float, required=True, help="epoch time the program starts")
    ap.add_argument("--stop-at", type=float, required=True, help="epoch time its group gets SIGTERM")
    ap.add_argument("--grace", type=float, default=5.0, help="seconds from SIGTERM to SIGKILL")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--stdout", required=True)
    ap.add_argument("--stderr", required=True)
    ap.add_argument("--out", required=True, help="the report (JSON)")
    ap.add_argument("program", nargs=argparse.REMAINDER, help="-- the program's argv")
    a = ap.parse_args(argv)
    prog = a.program[1:] if a.program[:1] == ["--"] else a.program
    if not prog:
        ap.error("no program given after --")
    env = dict(kv.split("=", 1) for kv in a.env)
    stop = StopFlag()
    rep = run(prog, env, a.start_at, a.stop_at, a.grace, a.stdout, a.stderr, stop)
    write_json({"rank": a.rank, **rep, "congestion": default_congestion()}, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Processes: run a tool without a shell, tell whether a PID is still ours and alive, stop PIDs we started.

Nothing here ever kills by name: only PIDs that hpnlab recorded, after checking their command line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

from hpnlab.errors import RuntimeFailure


def _thread_states(pid: int) -> list[str]:
    """The state letter of every thread of ``pid`` ([] if it is gone)."""
    out = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tids:
        try:
            out.append(Path(f"/proc/{pid}/task/{tid}/stat").read_text().split(")")[-1].split()[0])
        except OSError:
            pass
    return out


def pid_alive(pid: int) -> bool:
    """Alive = any thread of the process still runs. A multi-threaded daemon's main thread can exit
    first and show Z while its other threads still work: that process is not gone yet."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # the main thread running answers it with one read (a poll asks this of every daemon each second)
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] not in ("Z", "X"):
            return True
    except (OSError, IndexError):
        pass
    return any(s not in ("Z", "X") for s in _thread_states(pid))


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def processes() -> dict[int, list[str]]:
    """Every process on the machine: pid -> its command line (empty for kernel threads)."""
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            argv = cmdline(int(entry.name))
            if argv and argv != [""]:
                out[int(entry.name)] = argv
    return out


def is_node_process(argv: list[str]) -> bool:
    """An agent or tool of hpnlab's (``python -m hpnlab.node.X``)."""
    return any(a.startswith("hpnlab.node.") for a in argv)


def kill_pids(pids: dict[int, Callable[[list[str]], bool]], timeout: float = 5.0, hard: bool = False) -> list[int]:
    """SIGTERM (``hard``: SIGKILL) each PID whose cmdline the matcher recognises (never a recycled PID),
    then SIGKILL stragglers; returns only when every one of them has exited (all threads)."""
    ours = [pid for pid, match in pids.items() if pid_alive(pid) and match(cmdline(pid))]
    for pid in ours:
        try:
            if hard:
                os.kill(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGCONT)  # a hung-node fault may have stopped it; SIGTERM waits otherwise
                os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(p) for p in ours):
        time.sleep(0.02)
    for pid in ours:
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(pid_alive(p) for p in ours):
        time.sleep(0.02)
    for pid in ours:  # reap our own children so no zombie is left
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    return ours


def run(argv: list[str], *, input: str | None = None, timeout: float = 60, check: bool = True,
        what: str | None = None) -> subprocess.CompletedProcess:
    """Run without a shell; a failure raises one line naming the step and the tool's own message."""
    try:
        r = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise RuntimeFailure(f"{what or argv[0]}: '{argv[0]}' not found") from None
    except subprocess.TimeoutExpired:
        raise RuntimeFailure(f"{what or argv[0]}: timed out after {timeout:g} s") from None
    if check and r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        raise RuntimeFailure(f"{what or ' '.join(argv[:4])}: exit {r.returncode}: {msg[-1] if msg else ''}")
    return r

"""Agents forked from one pre-loaded process instead of each paying a Python start and its imports.

An agent started as ``ip netns exec NS python -m hpnlab.node.agents.tor ...`` costs ~70 ms of CPU before it does
anything (the interpreter, site-packages, its modules): 10 CPU-s for the paper's segment's 144 agents, all
of it while FRR starts on the same two cores. This launcher imports the agent modules once; for each agent
the controller asks for, it forks, and the child does what ``ip netns exec`` does (joins the node's named
network namespace, gets a mount namespace of its own with that network namespace's /sys, so the agents'
sysfs reads see their node's interfaces), redirects its output to the agent's log and runs the agent's
``main`` with the same arguments as on the command line.

Protocol (the controller, hpnlab.runtime.netns): one JSON object per line on stdin,
``{"netns": NAME, "module": "hpnlab.node.agents.tor", "argv": [...], "log": FILE, "name": NODE}``; one line back
per request, ``{"pid": N}`` or ``{"error": "..."}``. The launcher exits when stdin closes; the agents live
on as their own sessions. Run as ``python -m hpnlab.node.agents.launcher <lab state dir>/config`` (the argument
only marks the processes as the lab's: every forked agent keeps this command line, which is how a lab's
teardown finds an agent whose PID it did not record).
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import sys

from hpnlab.node.nsenter import CLONE_NEWNET, NETNS_DIR

CLONE_NEWNS = 0x00020000
MS_REC, MS_SLAVE = 0x4000, 0x80000
MNT_DETACH = 2
PR_SET_NAME = 15
MODULES = ("hpnlab.node.agents.tor", "hpnlab.node.agents.host", "hpnlab.node.agents.bondhost", "hpnlab.node.agents.fare")
_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def enter_node(netns: str) -> None:
    """What ``ip netns exec`` does before it runs a command: the named network namespace, and a private
    mount namespace in which /sys is that network namespace's sysfs."""
    fd = os.open(NETNS_DIR / netns, os.O_RDONLY)
    try:
        _check(_libc.setns(fd, CLONE_NEWNET), f"setns {netns}")
    finally:
        os.close(fd)
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(_libc.mount(None, b"/", None, MS_REC | MS_SLAVE, None), "mount --make-rslave /")
    _libc.umount2(b"/sys", MNT_DETACH)  # may not be mounted at all: then there is nothing to detach
    _check(_libc.mount(netns.encode(), b"/sys", b"sysfs", 0, None), "mount sysfs")


def child(req: dict) -> None:
    """In the forked child: become the agent. Never returns."""
    rc = 1
    try:
        os.setsid()
        enter_node(req["netns"])
        fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        _libc.prctl(PR_SET_NAME, req.get("name", "agent").encode()[:15], 0, 0, 0)  # ps shows the node
        sys.argv = ["python -m " + req["module"], *req["argv"]]
        rc = importlib.import_module(req["module"]).main(req["argv"]) or 0
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except BaseException as e:  # noqa: BLE001 - the agent's log says why it died
        print(f"hpnlab launcher: {req.get('module')} failed: {e.__class__.__name__}: {e}", file=sys.stderr)
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(rc)


def main(argv: list[str] | None = None) -> int:
    for m in MODULES:
        importlib.import_module(m)
    for line in sys.stdin:
        try:
            req = json.loads(line)
            if req.get("module") not in MODULES:
                raise ValueError(f"not an agent module: {req.get('module')!r}")
            if not (NETNS_DIR / req["netns"]).exists():
                raise ValueError(f"no network namespace {req['netns']}")
        except (ValueError, KeyError, TypeError) as e:
            print(json.dumps({"error": str(e)}), flush=True)
            continue
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            child(req)
        print(json.dumps({"pid": pid}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Interrupts: SIGINT, SIGTERM and SIGHUP all mean "stop and roll back", and a rollback, once started,
is never cut short by another one.

``handle_termination()`` (the CLI calls it at start) turns SIGINT, SIGTERM and SIGHUP into
``Interrupted``, a KeyboardInterrupt, after which further signals are only acknowledged, so timeout(1), systemd or a cancelled CI job roll a deploy back exactly like Ctrl-C.
``shielded()`` wraps every rollback and teardown: further signals are acknowledged ("rolling back,
please wait") and otherwise ignored until the cleanup is done.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A termination signal arrived (SIGINT is Python's own KeyboardInterrupt)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _ack(what: str):
    def ack(signum, _frame):
        print(f"hpnlab: {signal.Signals(signum).name} received: {what}, please wait", file=sys.stderr, flush=True)

    return ack


def _raise(signum, _frame):
    # From the first interrupt on, the process is cleaning up and will exit: later signals are only
    # acknowledged, so none can land before the rollback's own shield is in place.
    for s in SIGNALS:
        signal.signal(s, _ack("cleaning up"))
    raise Interrupted(signum)


def handle_termination() -> None:
    """SIGINT, SIGTERM and SIGHUP raise Interrupted in the main thread (from then on in this process)."""
    if threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, _raise)


def ignore_all() -> None:
    if threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, signal.SIG_IGN)


def exit_code(e: BaseException) -> int:
    return 128 + getattr(e, "signum", signal.SIGINT)


@contextlib.contextmanager
def shielded(what: str = "rolling back") -> Iterator[None]:
    """Run a cleanup to its end: signals meanwhile are acknowledged on stderr and ignored. Outside the
    main thread (where handlers cannot be set) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _ack(what)) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class DeadlinePassed(BaseException):
    """A step outlasted its deadline (``deadline()``). A BaseException, as KeyboardInterrupt is: no
    ``except Exception`` on the way may swallow it; the caller's rollback is its handler."""

    def __init__(self, seconds: float):
        super().__init__(f"deadline of {seconds:g} s passed")
        self.seconds = seconds


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise DeadlinePassed in the main thread once ``seconds`` have passed inside the block (SIGALRM, so
    it lands in whatever the block waits for, a child process included: subprocess kills it). Outside the
    main thread, or with a timer already set by someone else, it bounds nothing."""
    if threading.current_thread() is not threading.main_thread() or signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        yield
        return

    def fire(_signum, _frame):
        signal.setitimer(signal.ITIMER_REAL, 0)
        raise DeadlinePassed(seconds)

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)

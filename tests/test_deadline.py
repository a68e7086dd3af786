"""hpnlab.machine.signals.deadline, root-free: the bound `up --timeout` puts on a deploy lands in whatever the
deploy waits for (a child process included, which subprocess then kills), is a BaseException so no
``except Exception`` on the way swallows it, and leaves no timer behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from hpnlab.machine.signals import DeadlinePassed, deadline


def test_it_lands_in_a_child_process_wait_and_the_child_is_gone():
    began = time.monotonic()
    with pytest.raises(DeadlinePassed):
        with deadline(0.3):
            subprocess.run([sys.executable, "-c", "import time; time.sleep(30)"])
    assert time.monotonic() - began < 10
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_an_except_exception_on_the_way_does_not_swallow_it():
    def careless():
        try:
            time.sleep(5)
        except Exception:  # noqa: BLE001 - the point of the test
            return "swallowed"

    with pytest.raises(DeadlinePassed):
        with deadline(0.2):
            careless()


def test_a_block_that_ends_in_time_leaves_no_timer_and_the_old_handler():
    old = signal.getsignal(signal.SIGALRM)
    with deadline(5):
        pass
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0 and signal.getsignal(signal.SIGALRM) is old


def test_a_timer_someone_else_set_is_left_alone():
    fired = []
    old = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        with deadline(0.05):
            time.sleep(0.2)  # not bounded: the other timer is not ours to replace
        time.sleep(0.5)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert fired == [1]

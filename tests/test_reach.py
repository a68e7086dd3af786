"""verify's reachability prober on loopback: several groups (hosts) share one wait, split in batches of
sockets so that any lab size stays within a process's descriptors (the paper's segment has 1,024 host NIC
addresses: select() failed on it with 'filedescriptor out of range')."""

from __future__ import annotations

import os

import pytest

from hpnlab.node.programs import reach


@pytest.fixture(autouse=True)
def _root():
    if os.geteuid() != 0:
        pytest.skip("raw ICMP sockets need root")


def test_groups_share_a_wait():
    got = reach.reach_groups([(reach.bound_socket, [("127.0.0.1", "127.0.0.2"), ("127.0.0.1", "127.0.0.3")]),
                              (reach.bound_socket, [("127.0.0.9", "127.0.0.1")])], wait=0.3)
    assert got == {"127.0.0.1>127.0.0.2": True, "127.0.0.1>127.0.0.3": True, "127.0.0.9>127.0.0.1": True}


def test_many_groups_are_probed_in_batches(monkeypatch):
    monkeypatch.setattr(reach, "MAX_SOCKETS", 3)
    groups = [(reach.bound_socket, [(f"127.0.1.{i}", "127.0.0.1")]) for i in range(1, 11)]
    got = reach.reach_groups(groups, wait=0.5)
    assert len(got) == 10 and all(got.values()), got


def test_a_source_that_cannot_be_bound_is_unreachable_not_an_error():
    def refuse(src):
        raise OSError(99, "Cannot assign requested address")

    got = reach.reach_groups([(refuse, [("127.0.0.1", "127.0.0.2")]), (reach.bound_socket, [("127.0.0.3", "127.0.0.1")])],
                             wait=0.3)
    assert got == {"127.0.0.1>127.0.0.2": False, "127.0.0.3>127.0.0.1": True}


def test_a_path_that_comes_up_during_the_wait_counts_and_a_dead_one_costs_the_wait():
    """An echo that was dropped is sent again to the pairs that have not answered (every RESEND_S), so
    a route that appears during the wait is found in the same round instead of the next one; a pair
    that never answers is False after the wait."""
    import subprocess
    import threading
    import time
    import uuid

    from hpnlab.node import nsenter

    ns = f"hpnt-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        path = nsenter.NETNS_DIR / ns

        def opener(src):
            with nsenter.entered(path):
                return reach.bound_socket(src)

        # 10.9.9.9 is not there at the first echo (nothing answers it); it is added 0.5 s into the wait
        later = threading.Timer(0.5, lambda: subprocess.run(["ip", "-n", ns, "addr", "add", "10.9.9.9/32", "dev", "lo"],
                                                              check=True))
        later.start()
        t0 = time.monotonic()
        got = reach.reach_groups([(opener, [("127.0.0.1", "10.9.9.9"), ("127.0.0.1", "10.8.8.8")])], wait=1.5)
        took = time.monotonic() - t0
        later.join()
        assert got == {"127.0.0.1>10.9.9.9": True, "127.0.0.1>10.8.8.8": False}
        assert 1.4 < took < 3.0
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=True)

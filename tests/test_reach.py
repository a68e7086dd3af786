"""verify's reachability prober on loopback: several groups (hosts) share one wait, split in batches of
sockets so that any lab size stays within a process's descriptors (the paper's segment has 1,024 host NIC
addresses: select() failed on it with 'filedescriptor out of range')."""

from __future__ import annotations

import os

import pytest

from hpnlab.node import reach


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

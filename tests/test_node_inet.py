"""hpnlab.node.inet.receive_buffer: the one place node tools size their receive buffers.

The probe receiver, the agents' rtnetlink socket, the prober and the route monitor all need buffers past
net.core.rmem_max, a key every namespace shares with the machine; they used to each carry their own copy
of "force, else ask", with different exceptions caught."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from hpnlab.node.inet import SO_RCVBUFFORCE, receive_buffer


def rmem_max() -> int:
    return int(Path("/proc/sys/net/core/rmem_max").read_text())


@pytest.mark.root
def test_a_forced_buffer_goes_past_the_machines_cap():
    want = 4 * rmem_max()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        granted = receive_buffer(s, want)
        # the kernel doubles the request for its bookkeeping; a capped request would give 2 * rmem_max
        assert granted >= want
        assert granted > 2 * rmem_max()


class Refused:
    """A socket whose forced request fails as it does without CAP_NET_ADMIN (EPERM)."""

    def __init__(self, error: OSError):
        self.error = error
        self.calls: list[tuple[int, int]] = []

    def setsockopt(self, level: int, opt: int, value: int) -> None:
        self.calls.append((opt, value))
        if opt == SO_RCVBUFFORCE:
            raise self.error

    def getsockopt(self, level: int, opt: int) -> int:
        return 2 * self.calls[-1][1]


@pytest.mark.parametrize("error", [PermissionError(1, "Operation not permitted"), OSError(92, "Protocol not available")])
def test_without_the_capability_it_asks_for_a_plain_buffer(error):
    s = Refused(error)
    assert receive_buffer(s, 1 << 20) == 2 << 20  # type: ignore[arg-type]
    assert s.calls == [(SO_RCVBUFFORCE, 1 << 20), (socket.SO_RCVBUF, 1 << 20)]

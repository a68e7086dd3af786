"""A node's network namespace entered by one thread of this process, instead of a process started in it.

verify polls a converging lab every half second; each poll used to start a process per node and check
(``ip netns exec ... sysctl``, ``ip route``, a Python prober per host), 60-80 % of the controller's CPU
during a bring-up. A thread that switches its own network namespace (setns(2) applies to the calling
thread only) can read the node's sysctls in /proc/sys/net, dump its routes over netlink and open raw
sockets there; a socket keeps the namespace it was created in after the thread switches back, so one
select loop can serve sockets of every host at once.

Only for namespaces on this machine that have a name under /run/netns (the netns and containerlab
runtimes); elsewhere (clabernetes) callers keep running a command in the node.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
from collections.abc import Iterator
from pathlib import Path

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if hasattr(os, "setns"):  # Python 3.12+
        os.setns(fd, CLONE_NEWNET)
        return
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def entered(path: str | Path) -> Iterator[None]:
    """The calling thread inside the namespace at ``path`` for the block, then back in its own. If the way
    back fails the thread must not go on in a node's namespace: that is raised as SystemError."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(path, os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            try:
                _setns(own)
            except OSError as e:
                raise SystemError(f"could not return from network namespace {path}: {e}") from e
    finally:
        os.close(own)


def netlink_socket(path: str | Path) -> socket.socket:
    """A NETLINK_ROUTE socket that lives in the namespace at ``path`` (dumps through it see that node)."""
    with entered(path):
        return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)


def read_sysctls(path: str | Path, keys: list[str]) -> list[str]:
    """The values of ``keys`` (dotted sysctl names) as the node sees them; '?' for a key it lacks."""
    out = []
    with entered(path):
        for k in keys:
            try:
                out.append(Path("/proc/sys", *k.split(".")).read_text().strip())
            except OSError:
                out.append("?")
    return out


def write_sysctls(path: str | Path, values: dict[str, int | str]) -> None:
    """Set sysctls (dotted names) in the node, as ``sysctl -w`` run there would, without a process: the
    net.* files of /proc/sys belong to the namespace of the thread that opens them. An OSError names the
    key that failed (its ``filename``)."""
    with entered(path):
        for k, v in values.items():
            f = Path("/proc/sys", *k.split("."))
            try:
                f.write_text(f"{v}\n")
            except OSError as e:
                raise OSError(e.errno, e.strerror, k) from None


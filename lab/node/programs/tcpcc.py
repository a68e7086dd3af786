"""TCP congestion control of a workload's sockets: chosen per socket, read back for the report.

A network namespace cannot change the kernel's default algorithm (``net.ipv4.tcp_congestion_control`` is
the init namespace's; writing it in a lab's namespace is EPERM for anything outside
``tcp_allowed_congestion_control``), so every workload socket asks for its algorithm itself
(``setsockopt(TCP_CONGESTION)``; a process with CAP_NET_ADMIN, as the node programs are, may pick any
algorithm the kernel has, and the kernel loads its module on demand). A socket that cannot have it is an
error, never a silent fall-back to the kernel's default: the figures would then describe another TCP.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable

TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)  # linux/tcp.h
NAME_MAX = 16  # TCP_CA_NAME_MAX, with its NUL
DEFAULT = "cubic"  # Debian's and Ubuntu's kernels' default, what the docs reason from


def available() -> str:
    try:
        with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def of(sock: socket.socket) -> str:
    """The algorithm the socket runs (getsockopt TCP_CONGESTION)."""
    return sock.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, NAME_MAX).split(b"\0", 1)[0].decode()


def use(sock: socket.socket, name: str) -> str:
    """Give the socket ``name``; raise SystemExit (the program exits 1 with this one line on stderr) when
    the kernel refuses it or the socket reads back another algorithm. Returns the algorithm in use."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, name.encode())
    except OSError as e:
        raise SystemExit(f"setsockopt(TCP_CONGESTION, {name!r}) failed: {e.strerror or e} (this kernel has: "
                         f"{available()}); the workload's congestion control must be one of them") from None
    got = of(sock)
    if got != name:
        raise SystemExit(f"TCP_CONGESTION: asked for {name!r}, the socket runs {got!r}")
    return got


def summary(names: Iterable[str]) -> str | None:
    """The report's ``congestion``: the one algorithm every socket ran ("a,b" if they differed; None: no socket)."""
    s = sorted(set(names))
    return ",".join(s) if s else None

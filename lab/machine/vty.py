"""One command to one FRR daemon over its vty socket, without a vtysh process.

vtysh is a C program that connects to each daemon's ``<pathspace>/<daemon>.vty`` Unix socket, writes the
command line with a NUL after it and reads the daemon's output up to a four-byte trailer: three NULs and
the command's return code (FRR's lib/vty.c, ``vtysh_read``: the daemon's side of that socket starts a
vtysh connection in the view node). Most ``show`` commands are there, not all: FRR 8.4's bfdd installs its
``show bfd ...`` commands in the enable node only (its answer in the view node: "% [BFD] Unknown command"),
so ``enable=True`` sends ``enable`` first on the same connection, as vtysh does. Starting vtysh costs ~20 ms of CPU
before it says anything; verify asks every router's bgpd during bring-up, so on 76 routers that was
~1.5 CPU-s of a bring-up that is CPU-bound. Speaking the protocol from here costs the daemon's answer only.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

TRAILER = 4  # b"\0\0\0" + the return code (0: CMD_SUCCESS)


class VtyError(OSError):
    """The daemon did not answer (no socket, refused, closed early, or too slow)."""


def _answer(s: socket.socket, sock_path: Path, deadline: float) -> bytes:
    """One command's output and trailer: read up to three NULs and the return code."""
    chunks: list[bytes] = []
    tail = b""
    while len(tail) < TRAILER or tail[:3] != b"\0\0\0":
        s.settimeout(max(0.01, deadline - time.monotonic()))
        data = s.recv(1 << 16)
        if not data:
            raise VtyError(f"{sock_path}: closed before the end of the answer")
        chunks.append(data)
        tail = (tail + data)[-TRAILER:]
    return b"".join(chunks)


def command(sock_path: Path, line: str, timeout: float = 5.0, enable: bool = False) -> tuple[int, str]:
    """(return code, output) of one command; VtyError if the daemon does not answer within ``timeout``.
    ``enable``: enter the enable node first (a command installed only there, e.g. bfdd's ``show bfd``)."""
    deadline = time.monotonic() + timeout
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(sock_path))
            if enable:
                s.sendall(b"enable\0")
                got = _answer(s, sock_path, deadline)
                if got[-1] != 0:
                    return got[-1], got[:-TRAILER].decode(errors="replace")
            s.sendall(line.encode() + b"\0")
            out = _answer(s, sock_path, deadline)
    except socket.timeout:
        raise VtyError(f"{sock_path}: no answer within {timeout:g} s") from None
    except VtyError:
        raise
    except OSError as e:
        raise VtyError(f"{sock_path}: {e.strerror or e}") from None
    return out[-1], out[:-TRAILER].decode(errors="replace")


def command_json(sock_path: Path, line: str, timeout: float = 5.0, enable: bool = False) -> dict | list | None:
    """A ``... json`` command's parsed answer; None if the daemon did not answer, failed, or wrote no JSON."""
    try:
        code, out = command(sock_path, line, timeout, enable)
    except VtyError:
        return None
    if code != 0:
        return None
    try:
        return json.loads(out or "null")
    except ValueError:
        return None


def listening(sock_path: Path) -> bool:
    """Whether a daemon listens on its vty socket (False: no socket file, or one a dead daemon left, where a
    connection is refused); tells "not running" from "running but not answering"."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            s.connect(str(sock_path))
        return True
    except (FileNotFoundError, ConnectionRefusedError):
        return False
    except OSError:  # e.g. a full backlog: something listens
        return True

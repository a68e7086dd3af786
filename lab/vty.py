"""One command to one FRR daemon over its vty socket, without a vtysh process.

vtysh is a C program that connects to each daemon's ``<pathspace>/<daemon>.vty`` Unix socket, writes the
command line with a NUL after it and reads the daemon's output up to a four-byte trailer: three NULs and
the command's return code (FRR's lib/vty.c, ``vtysh_read``: the daemon's side of that socket starts a
vtysh connection in the view node, where every ``show`` command is). Starting vtysh costs ~20 ms of CPU
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


def command(sock_path: Path, line: str, timeout: float = 5.0) -> tuple[int, str]:
    """(return code, output) of one command; VtyError if the daemon does not answer within ``timeout``."""
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    tail = b""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(sock_path))
            s.sendall(line.encode() + b"\0")
            while len(tail) < TRAILER or tail[:3] != b"\0\0\0":
                s.settimeout(max(0.01, deadline - time.monotonic()))
                data = s.recv(1 << 16)
                if not data:
                    raise VtyError(f"{sock_path}: closed before the end of the answer")
                chunks.append(data)
                tail = (tail + data)[-TRAILER:]
    except socket.timeout:
        raise VtyError(f"{sock_path}: no answer within {timeout:g} s") from None
    except VtyError:
        raise
    except OSError as e:
        raise VtyError(f"{sock_path}: {e.strerror or e}") from None
    out = b"".join(chunks)
    return out[-1], out[:-TRAILER].decode(errors="replace")


def command_json(sock_path: Path, line: str, timeout: float = 5.0) -> dict | list | None:
    """A ``... json`` command's parsed answer; None if the daemon did not answer, failed, or wrote no JSON."""
    try:
        code, out = command(sock_path, line, timeout)
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

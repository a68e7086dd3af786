"""hpnlab.machine.vty speaks the daemon side of FRR's vtysh socket (lib/vty.c, vtysh_read): a command line ending in
NUL goes in; the output, then three NULs and the return code, come back. A fake daemon on a Unix socket
answers the way FRR 8.4's does, so the client's framing, errors and timeouts are tested without root."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from hpnlab.machine import vty


def fake_daemon(path: Path, answer: bytes, code: int = 0, split: int = 0, delay: float = 0.0,
                close_early: bool = False) -> threading.Thread:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)
    seen: list[bytes] = []

    def serve():
        conn, _ = srv.accept()
        with conn, srv:
            buf = b""
            while not buf.endswith(b"\0"):
                buf += conn.recv(4096)
            seen.append(buf)
            time.sleep(delay)
            out = answer + (b"" if close_early else b"\0\0\0" + bytes([code]))
            step = split or len(out)  # split: the answer in pieces, the trailer across two of them
            try:
                for i in range(0, len(out), step):
                    conn.sendall(out[i:i + step])
                    time.sleep(0.005)
            except OSError:  # the client gave up first (the timeout case)
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.seen = seen
    t.start()
    return t


def test_command_sends_a_nul_terminated_line_and_reads_to_the_trailer(tmp_path):
    body = json.dumps({"ipv4Unicast": {"peers": {f"p{i}": {"state": "Established"} for i in range(500)}}}).encode()
    t = fake_daemon(tmp_path / "bgpd.vty", body, split=3001)
    code, out = vty.command(tmp_path / "bgpd.vty", "show bgp summary json")
    t.join(2)
    assert t.seen == [b"show bgp summary json\0"]
    assert code == 0 and json.loads(out) == json.loads(body)


def test_a_failed_command_keeps_its_code_and_gives_no_json(tmp_path):
    fake_daemon(tmp_path / "bgpd.vty", b"% [BGP] Unknown command: show nonsense\n", code=2)
    assert vty.command(tmp_path / "bgpd.vty", "show nonsense") == (2, "% [BGP] Unknown command: show nonsense\n")
    fake_daemon(tmp_path / "b2.vty", b"% [BGP] Unknown command\n", code=2)
    assert vty.command_json(tmp_path / "b2.vty", "show nonsense json") is None


@pytest.mark.parametrize("case", ["missing", "closed early", "too slow"])
def test_no_answer_is_a_vty_error_or_none(tmp_path, case):
    path = tmp_path / "bgpd.vty"
    if case == "closed early":
        fake_daemon(path, b'{"half":', close_early=True)
    elif case == "too slow":
        fake_daemon(path, b"{}", delay=1.0)
    t0 = time.monotonic()
    with pytest.raises(vty.VtyError, match=str(path)):
        vty.command(path, "show bgp summary json", timeout=0.3)
    assert time.monotonic() - t0 < 0.9
    assert vty.command_json(tmp_path / "nothing.vty", "show bgp summary json", timeout=0.3) is None


def test_listening_tells_a_dead_daemon_from_a_silent_one(tmp_path):
    assert not vty.listening(tmp_path / "absent.vty")
    stale = tmp_path / "stale.vty"  # the socket file a killed daemon leaves: connections are refused
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()
    assert stale.exists() and not vty.listening(stale)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as hung:  # listens, never answers
        hung.bind(str(tmp_path / "hung.vty"))
        hung.listen(1)
        assert vty.listening(tmp_path / "hung.vty")
        assert vty.command_json(tmp_path / "hung.vty", "show bgp summary json", timeout=0.2) is None


def test_bfdd_show_commands_are_asked_in_the_enable_node(tmp_path):
    """FRR 8.4's bfdd has ``show bfd ...`` in the enable node only: asked in the view node, where a vtysh
    connection starts, it answers 'Unknown command' (code 2), and the segment bench read that as 'bfdd did
    not answer'. A fake bfdd keeps the node per connection as lib/vty.c does."""
    path = tmp_path / "bfdd.vty"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(4)
    seen: list[list[str]] = []

    def serve():
        with srv:
            for _ in range(2):
                conn, _ = srv.accept()
                with conn:
                    node, lines, buf = "view", [], b""
                    seen.append(lines)
                    while True:
                        data = conn.recv(4096)
                        if not data:
                            break
                        buf += data
                        while b"\0" in buf:
                            line, buf = buf.split(b"\0", 1)
                            lines.append(line.decode())
                            if line == b"enable":
                                node, out, code = "enable", b"", 0
                            elif node == "enable":
                                out, code = b'[{"session-down": 2}]', 0
                            else:
                                out, code = b"% [BFD] Unknown command: " + line + b"\n", 2
                            conn.sendall(out + b"\0\0\0" + bytes([code]))

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    assert vty.command_json(path, "show bfd peers counters json") is None  # the view node: unknown
    assert vty.command_json(path, "show bfd peers counters json", enable=True) == [{"session-down": 2}]
    t.join(2)
    assert seen == [["show bfd peers counters json"], ["enable", "show bfd peers counters json"]]

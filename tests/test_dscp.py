"""Root-free tests of workload.dscp: the key's checks, the node programs' command lines, and the marking of
both ends of a TCP connection (on loopback)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from hpnlab.errors import SpecError
from hpnlab.node.programs import dscp


def _load(tmp_path: Path, workload: dict):
    from hpnlab.traffic.run import experiment

    p = tmp_path / "w.yml"
    p.write_text(f"name: w\nduration: 5\nworkload: {json.dumps(workload)}\n")
    return experiment.load(p).plans[0]


def test_both_ends_of_a_marked_connection_send_its_dscp():
    """The listener's mark reaches the connection it accepts (the receiver's ACKs), and the connecting
    socket sends its own; an unmarked socket stays at 0."""
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.bind(("127.0.0.1", 0))
    assert dscp.mark(ls, 34) == 34
    ls.listen(1)
    c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    dscp.mark(c, 34)
    c.connect(ls.getsockname())
    a, _ = ls.accept()
    plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        assert dscp.of(c) == 34 and dscp.of(a) == 34  # accepted: inherited, not set again
        assert dscp.mark(plain, None) is None and dscp.of(plain) == 0
    finally:
        for s in (ls, c, a, plain):
            s.close()
    with pytest.raises(ValueError):
        dscp.tos_of(64)


@pytest.mark.parametrize("workload,msg", [
    ({"kind": "allreduce", "dscp": 64}, "'workload.dscp': Input should be less than or equal to 63"),
    ({"kind": "allreduce", "dscp": -1}, "'workload.dscp': Input should be greater than or equal to 0"),
    ({"kind": "allreduce", "dscp": "ef"}, "'workload.dscp': Input should be a valid integer"),
    ({"kind": "iperf3", "src": "s0h0", "dst": "s1h0", "dscp": 10},
     "'workload.dscp': workload kind 'iperf3' cannot mark its traffic at both ends"),
    ({"kind": "none", "dscp": 10}, "'workload.dscp': workload kind 'none' cannot mark"),
])
def test_a_bad_or_unmarkable_dscp_is_one_line(tmp_path, workload, msg):
    with pytest.raises(SpecError) as e:
        _load(tmp_path, workload)
    assert msg in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("kind,roles", [
    ("allreduce", {"allreduce"}),
    ("alltoall", {"alltoall-tx", "alltoall-rx"}),
    ("elephant", {"elephant-tx", "elephant-rx"}),
])
def test_every_sender_and_receiver_is_told_the_dscp_and_unmarked_lines_are_unchanged(tmp_path, kind, roles):
    from hpnlab.traffic import workloads

    marked, plain = _load(tmp_path, {"kind": kind, "dscp": 46}), _load(tmp_path, {"kind": kind})
    hosts = sorted(n for n, c in plain.cfgs.items() if c.role == "host")
    for plan in (marked, plain):
        plan.flows = [{"src": hosts[0], "dst": hosts[-1], "sport": 41000}]  # elephant: one flow of a path map
    got = workloads.get(kind).launch(marked, tmp_path, 100.0, 5.0)
    base = workloads.get(kind).launch(plain, tmp_path, 100.0, 5.0)
    assert {p["role"] for p in got} >= roles
    for p, q in zip(got, base):
        if p["role"] in roles:
            assert p["argv"][-2:] == ["--dscp", "46"] and p["argv"][:-2] == q["argv"]
        else:
            assert "--dscp" not in p["argv"]  # the switches' samplers send nothing
        assert "--dscp" not in q["argv"]


def test_the_node_programs_refuse_a_dscp_out_of_range(capsys):
    from hpnlab.node.programs import allreduce, elephant

    for main, argv in ((allreduce.main, ["--rank", "0", "--addrs", "127.0.0.1", "--duration", "1", "--out", "x"]),
                       (elephant.main, ["serve", "--bind", "127.0.0.1", "--duration", "1", "--out", "x"])):
        with pytest.raises(SystemExit) as e:
            main(argv + ["--dscp", "64"])
        assert e.value.code == 2 and "--dscp" in capsys.readouterr().err

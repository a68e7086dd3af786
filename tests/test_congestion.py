"""TCP congestion control of the workloads (no lab): every TCP program's command line carries
workload.congestion (cubic by default), the key is validated, a kernel without the algorithm is refused in
one line before any lab, the node programs set it per socket and fail loudly, and what ran is recorded."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from hpnlab.machine import kernel
from hpnlab.errors import SpecError
from hpnlab.traffic import runner, workloads
from hpnlab.traffic.run import experiment
from hpnlab.traffic.workloads.base import congestion_of
from tests.conftest import ROOT


def _load(tmp_path: Path, workload: dict, variants: str = ""):
    p = tmp_path / "cc.yml"
    p.write_text(f"name: cc\nspec: {ROOT / 'examples' / 'default.yml'}\nduration: 5\n"
                 f"workload: {json.dumps(workload)}\n{variants}")
    return experiment.load(p)


def _opt(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, argv
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("kind,extra", [("allreduce", {}), ("alltoall", {"connections": 1}),
                                        ("iperf3", {"src": "s0h0", "dst": "s1h0"})])
def test_every_tcp_program_gets_the_congestion_control_cubic_by_default(tmp_path, kind, extra):
    for given, want in (({}, "cubic"), ({"congestion": "reno"}, "reno")):
        plan = _load(tmp_path, {"kind": kind, **extra, **given}).plans[0]
        assert plan.workload.congestion == want
        procs = workloads.get(kind).launch(plan, tmp_path, 100.0, 5.0)
        tcp = [p for p in procs if p["argv"][0] != "iperf3" or "-c" in p["argv"]]  # iperf3: -C is the client's
        assert tcp
        for p in tcp:
            assert _opt(p["argv"], "-C" if p["argv"][0] == "iperf3" else "--congestion") == want, p


def test_elephant_senders_and_receivers_get_it(tmp_path):
    plan = _load(tmp_path, {"kind": "elephant", "congestion": "bbr"}).plans[0]
    plan.flows = [{"src": "s0h0", "dst": "s1h0", "sport": 40000}]
    procs = workloads.get("elephant").launch(plan, tmp_path, 100.0, 5.0)
    ele = [p for p in procs if p["role"].startswith("elephant-")]
    assert {p["role"] for p in ele} == {"elephant-rx", "elephant-tx"}
    assert all(_opt(p["argv"], "--congestion") == "bbr" for p in ele)
    assert all("--congestion" not in p["argv"] for p in procs if p["role"] == "linkstats")


def test_the_node_programs_take_the_option():
    from hpnlab.node.programs import allreduce, elephant

    for mod in (allreduce, elephant):
        with pytest.raises(SystemExit):
            mod.main(["--help"])


@pytest.mark.parametrize("bad", ["Cubic", "cubic; rm", "", "x" * 16, "1cubic"])
def test_a_bad_name_is_one_line_naming_the_key(tmp_path, bad):
    with pytest.raises(SpecError) as e:
        _load(tmp_path, {"kind": "allreduce", "congestion": bad})
    msg = str(e.value)
    assert "experiment field 'workload.congestion'" in msg and "not a TCP congestion control name" in msg
    assert "\n" not in msg


def test_a_variant_may_choose_its_own(tmp_path):
    exp = _load(tmp_path, {"kind": "allreduce"},
                "variants: [{name: c}, {name: b, workload: {kind: allreduce, congestion: bbr}}]\n")
    assert [p.workload.congestion for p in exp.plans] == ["cubic", "bbr"]


def test_kernel_lists_available_and_loadable(tmp_path):
    proc = tmp_path / "proc"
    (proc / "net" / "ipv4").mkdir(parents=True)
    (proc / "net" / "ipv4" / "tcp_available_congestion_control").write_text("reno cubic\n")
    mods = tmp_path / "modules" / "6.1.0-9-amd64" / "kernel" / "net" / "ipv4"
    mods.mkdir(parents=True)
    for m in ("tcp_bbr.ko", "tcp_dctcp.ko.xz", "tcp_diag.ko", "tcp_cubic.ko.zst", "udp_diag.ko"):
        (mods / m).write_text("")
    have, loadable = kernel.congestion_controls(proc, tmp_path / "modules", "6.1.0-9-amd64")
    assert have == ["reno", "cubic"] and loadable == ["bbr", "dctcp"]
    assert kernel.congestion_controls(tmp_path / "none", tmp_path / "none", "x") == ([], [])


def test_the_refusal_names_the_field_what_the_kernel_has_and_the_fix():
    msg = kernel.congestion_refusal("dctcp", ["reno", "bbr", "cubic"], ["htcp"], "6.18.44")
    assert msg == ("experiment field 'workload.congestion': kernel 6.18.44 has no TCP congestion control 'dctcp' "
                   "(it has reno, bbr, cubic; loadable: htcp); choose one of those (cubic is Debian's and Ubuntu's "
                   "default), or use a kernel built with it (CONFIG_TCP_CONG_DCTCP)")
    assert kernel.congestion_refusal("cubic", ["reno", "cubic"], [], "x") is None
    assert kernel.congestion_refusal("htcp", ["reno"], ["htcp"], "x") is None  # a socket asking loads it
    assert kernel.congestion_refusal("cubic", [], [], "x") is None  # no /proc: the programs judge


def test_the_runner_refuses_before_any_lab_with_exit_2(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel, "probe_all", lambda: {k: True for k in kernel.FEATURES})
    monkeypatch.setattr(kernel, "congestion_controls", lambda: (["reno", "bbr"], []))
    exp = _load(tmp_path, {"kind": "allreduce"})
    with pytest.raises(kernel.KernelError) as e:
        runner.refuse_on_this_kernel(exp, "netns")
    assert e.value.exit_code == 2 and "\n" not in str(e.value)
    assert str(e.value).startswith("variant 'default': experiment field 'workload.congestion': kernel ")
    assert "no TCP congestion control 'cubic' (it has reno, bbr)" in str(e.value)
    runner.refuse_on_this_kernel(_load(tmp_path, {"kind": "allreduce", "congestion": "bbr"}), "netns")
    runner.refuse_on_this_kernel(_load(tmp_path, {"kind": "none"}), "netns")  # probes are UDP: not judged
    runner.refuse_on_this_kernel(exp, "c9s")  # the nodes are another machine's: their programs judge


def test_a_socket_gets_it_or_the_program_exits_saying_why():
    from hpnlab.node.programs import tcpcc

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        assert tcpcc.use(s, "reno") == "reno" == tcpcc.of(s)  # reno is in every kernel's allowed list
        with pytest.raises(SystemExit) as e:
            tcpcc.use(s, "nosuchcc")
        assert "setsockopt(TCP_CONGESTION, 'nosuchcc') failed" in str(e.value.code)
        assert tcpcc.of(s) == "reno"
    assert tcpcc.summary(["cubic", "cubic"]) == "cubic" and tcpcc.summary([]) is None
    assert tcpcc.summary(["reno", "cubic"]) == "cubic,reno"


def test_what_ran_is_recorded_per_repetition_and_variant(tmp_path):
    assert congestion_of([{"congestion": "cubic"}, {"congestion": "cubic"}, {}]) == "cubic"
    assert congestion_of([{"congestion": "cubic"}, {"congestion": "bbr,reno"}]) == "bbr,cubic,reno"
    assert congestion_of([{"kind": "old report"}]) is None
    plan = _load(tmp_path, {"kind": "allreduce"}).plans[0]
    runs = [{"workload": {"congestion": "cubic"}}, {"workload": {"congestion": "cubic"}}, {"workload": {}}]
    assert runner.congestion_record(plan, runs) == {"requested": "cubic", "ran": ["cubic"]}
    assert runner.variant_record(plan)["congestion"] == {"requested": "cubic", "ran": []}
    assert runner.congestion_record(plan, [], "bbr") == {"requested": "bbr", "ran": []}
    none = _load(tmp_path, {"kind": "none"}).plans[0]
    assert runner.congestion_record(none, [{"workload": {}}]) == {"requested": None, "ran": []}


def test_iperf3_result_says_what_both_ends_ran(tmp_path):
    plan = _load(tmp_path, {"kind": "iperf3", "src": "s0h0", "dst": "s1h0"}).plans[0]
    (tmp_path / "iperf3.json").write_text(json.dumps({
        "start": {"timestamp": {"timesecs": 100}}, "intervals": [],
        "end": {"sum_sent": {"retransmits": 3}, "sender_tcp_congestion": "cubic", "receiver_tcp_congestion": "cubic"}}))
    assert workloads.get("iperf3").result(plan, tmp_path)["congestion"] == "cubic"
    (tmp_path / "iperf3.json").write_text(json.dumps({"error": "unable to set TCP_CONGESTION: Supplied congestion "
                                                      "control algorithm not supported on this host"}))
    r = workloads.get("iperf3").result(plan, tmp_path)
    assert r["congestion"] is None and "TCP_CONGESTION" in r["error"]


def test_allreduce_and_alltoall_results_carry_it(tmp_path):
    plan = _load(tmp_path, {"kind": "allreduce"}).plans[0]
    for rank in (0, 1):
        (tmp_path / f"allreduce-{rank}.json").write_text(json.dumps({
            "rank": rank, "connections": 4, "ranks": 2, "bytes_per_iteration": 1, "iterations": [],
            "resent_segments": 0, "duplicate_segments": 0, "congestion": "cubic"}))
    assert workloads.get("allreduce").result(plan, tmp_path)["congestion"] == "cubic"
    plan = _load(tmp_path, {"kind": "alltoall"}).plans[0]
    (tmp_path / "alltoall-tx-s0h0.json").write_text(json.dumps({"complete": True, "completion_s": 1.0,
                                                                 "congestion": "cubic"}))
    (tmp_path / "alltoall-rx-s0h0.json").write_text(json.dumps({"congestion": "cubic"}))
    assert workloads.get("alltoall").result(plan, tmp_path)["congestion"] == "cubic"


def test_a_run_with_a_missing_algorithm_exits_2_in_one_line_before_any_lab(tmp_path):
    """Through the command line: refused after the file is read, before a lab (needs root: ``hpnlab run``)."""
    import os
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("hpnlab run needs root before it judges the kernel")
    p = tmp_path / "x.yml"
    p.write_text(f"name: x\nspec: {ROOT / 'examples' / 'default.yml'}\nduration: 5\nlab_prefix: ccx\n"
                 "workload: {kind: allreduce, congestion: nosuchcc}\n")
    r = subprocess.run([sys.executable, "-m", "hpnlab.cli", "run", str(p), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "experiment field 'workload.congestion'" in r.stderr and "'nosuchcc'" in r.stderr
    assert not Path("/run/hpnlab/ccx0").exists()

"""bench/idle_cpu.py's grouping and arithmetic, without a lab (root-free)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import ROOT

_spec = importlib.util.spec_from_file_location("idle_cpu_bench", ROOT / "bench" / "idle_cpu.py")
ic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ic)


def _stat(comm: str, utime: int, stime: int, cutime: int = 0, cstime: int = 0) -> str:
    # fields 3.. after "(comm) ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime ...
    rest = ["S", "1", "1", "1", "0", "-1", "4194304", "10", "0", "0", "0", str(utime), str(stime), str(cutime),
            str(cstime), "20", "0", "1", "0"]
    return f"4242 ({comm}) " + " ".join(rest)


def test_parse_stat_sums_own_and_waited_children_time():
    assert ic.parse_stat(_stat("bgpd", 30, 12, 5, 3)) == ("bgpd", 50)


def test_parse_stat_keeps_a_name_with_spaces_and_parentheses():
    # the launcher names each agent after its node; a comm can hold ") (" and spaces
    assert ic.parse_stat(_stat("odd) (name x", 7, 1)) == ("odd) (name x", 8)


@pytest.mark.parametrize("comm,cmd,role,kind", [
    ("zebra", "/usr/lib/frr/zebra -d -N x", "tor", "zebra"),
    ("bgpd", "/usr/lib/frr/bgpd", "agg", "bgpd"),
    ("bfdd", "/usr/lib/frr/bfdd", "agg", "bfdd"),
    ("watchfrr", "/usr/lib/frr/watchfrr", "tor", "watchfrr"),
    ("s0r0a", "python -m hpnlab.node.agents.launcher /var/lib/hpnlab/x/config", "tor", "agent_tor"),
    ("s0h0", "/x/.venv/bin/python -m hpnlab.node.agents.host node.json", "host", "agent_host"),
    ("iperf3", "iperf3 -s", "host", "other"),
])
def test_kind_of(comm, cmd, role, kind):
    assert ic.kind_of(comm, cmd, role) == kind


def test_pct_by_kind_counts_deltas_new_processes_and_not_reused_pids():
    hz = 100
    before = {1: ("bgpd", 1000), 2: ("agent_tor", 500), 3: ("zebra", 70), 9: ("other", 5)}
    after = {1: ("bgpd", 1040),  # 40 ticks in 20 s at 100 Hz: 0.4 s = 2 % of a core
             2: ("agent_tor", 600),  # 100 ticks: 5 %
             3: ("agent_host", 30),  # pid 3 reused by another kind: counted from 0
             4: ("agent_tor", 20)}  # started inside the window: from 0
    got = ic.pct_by_kind(before, after, 20.0, hz)
    assert got == {"agent_host": 1.5, "agent_tor": 6.0, "bgpd": 2.0}
    assert "other" not in got  # ended inside the window: gone, not negative


def test_pct_by_kind_never_negative():
    assert ic.pct_by_kind({1: ("bgpd", 90)}, {1: ("bgpd", 80)}, 10.0, 100) == {"bgpd": 0.0}


def test_machine_busy_and_psi():
    assert ic.machine_busy_ticks("cpu  100 5 50 9000 7 3 2 1 0 0") == 100 + 5 + 50 + 3 + 2 + 1
    psi = "some avg10=1.00 avg60=0.50 avg300=0.10 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=9\n"
    assert ic.psi_some_total_us(psi) == 123456
    with pytest.raises(ValueError):
        ic.psi_some_total_us("full avg10=0 total=1")


def test_late_in_window_takes_only_the_windows_bins():
    timers = {"s0r0a": {"bins": [[99.9, 50.0], [100.0, 3.0], [104.9, 7.5]]}, "s0h0": {"bins": [[105.0, 80.0]]},
              "s1h0": {}}
    assert ic.late_in_window(timers, 100.0, 105.0) == {"worst_ms": 7.5, "late_bins": 2}


def test_mechanism_costs_are_production_minus_each_ablation():
    cases = {"production": {"pct_lab": 10.0}, "lacp-slow": {"pct_lab": 6.5}, "bfd-off": {"pct_lab": 8.25},
             "relaxed": {"pct_lab": 4.0}}
    assert ic.mechanism_costs(cases) == {"lacp-slow": 3.5, "bfd-off": 1.75, "relaxed": 6.0}
    assert ic.mechanism_costs({"lacp-slow": {"pct_lab": 1.0}}) == {}
    assert ic.mechanism_costs({"relaxed": {"pct_lab": 4.0}, "lacp-fast-only": {"pct_lab": 9.5}}) == {"lacp-fast-only": 5.5}


def test_every_case_is_a_valid_override_and_relaxed_is_all_three():
    assert ic.CASES["relaxed"] == {"lacp": {"fast_rate": False}, "bfd": {"enabled": False},
                                   "bgp": {"keepalive": 3, "hold": 9}}
    from hpnlab.api import resolve_spec

    for case, over in ic.CASES.items():
        sp = resolve_spec("default", "icpu", over or None)
        assert sp.name == "icpu", case


def test_summary_lists_every_case_and_cost():
    row = {"nodes": 16, "pct_lab": 12.0, "pct_machine": 20.0, "psi_some_pct": 3.0,
           "agent_timers_late": {"worst_ms": 1.5}, "pct_core": {"bgpd": 4.0, "agent_tor": 8.0}}
    doc = {"labs": {"default": {"current": {"label": "abc", "cases": {"production": row},
                                            "mechanism_cost_pct": {"lacp-slow": 2.5}}}}}
    text = ic.summary(doc)
    assert "production" in text and "agent_tor" in text and "LACP fast" in text and "2.50" in text


def test_softirq_ticks():
    assert ic.softirq_ticks("cpu  100 5 50 9000 7 3 2 1 0 0") == 5


def test_parse_stat_split_keeps_system_time_apart():
    assert ic.parse_stat_split(_stat("s0h0", 30, 12, 5, 3)) == ("s0h0", 35, 15)

"""The quiet-machine check before a benchmark or an experiment, on fake /proc readings: what counts as
busy, the bounded wait, the one-line refusal, --busy-ok's record, and the provenance that carries it."""

import subprocess
import sys
from pathlib import Path

import pytest

from hpnlab.instrument import machineload, provenance

ROOT = Path(__file__).resolve().parents[1]


def fake_proc(tmp_path: Path, load1: float, psi10: float | None) -> Path:
    d = tmp_path / "proc"
    (d / "pressure").mkdir(parents=True, exist_ok=True)
    (d / "loadavg").write_text(f"{load1} 3.00 2.00 2/500 1234\n")
    if psi10 is None:
        (d / "pressure" / "cpu").unlink(missing_ok=True)
    else:
        (d / "pressure" / "cpu").write_text(f"some avg10={psi10:.2f} avg60=1.50 avg300=0.10 total=1\n"
                                            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    return d


def test_readings_and_what_counts_as_busy(tmp_path):
    r = machineload.read(fake_proc(tmp_path, 0.4, 2.0), cores=2)
    assert r["loadavg"] == [0.4, 3.0, 2.0] and r["psi_cpu_some"] == {"avg10": 2.0, "avg60": 1.5} and r["cores"] == 2
    assert machineload.busy_reason(r) is None
    assert machineload.busy_reason(machineload.read(fake_proc(tmp_path, 1.5, 2.0), cores=2)) is None  # < 1 a core
    assert "load average 2.5" in machineload.busy_reason(machineload.read(fake_proc(tmp_path, 2.5, 2.0), cores=2))
    assert "CPU pressure 92.5" in machineload.busy_reason(machineload.read(fake_proc(tmp_path, 0.1, 92.5), cores=2))
    # a kernel without PSI: the load alone
    r = machineload.read(fake_proc(tmp_path, 0.1, None), cores=2)
    assert r["psi_cpu_some"] is None and machineload.busy_reason(r) is None


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def test_busy_waits_bounded_then_refuses_in_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv(machineload.ENV, raising=False)
    proc, clock, said = fake_proc(tmp_path, 8.8, 92.5), Clock(), []
    with pytest.raises(machineload.MachineBusy) as e:
        machineload.settle(False, max_wait_s=120, progress=said.append, proc=proc, cores=2, sleep=clock.sleep,
                           clock=clock)
    assert "\n" not in str(e.value) and "--busy-ok" in str(e.value) and "120" in str(e.value)
    assert clock.t == pytest.approx(120) and len(said) == 24 and "waiting" in said[0]


def test_a_machine_that_quietens_during_the_wait_is_measured(tmp_path, monkeypatch):
    monkeypatch.delenv(machineload.ENV, raising=False)
    proc, clock = fake_proc(tmp_path, 8.8, 92.5), Clock()

    def sleep(s):
        clock.sleep(s)
        if clock.t >= 15:
            fake_proc(tmp_path, 0.3, 1.0)

    rec = machineload.settle(False, proc=proc, cores=2, sleep=sleep, clock=clock, progress=lambda m: None)
    assert rec["busy"] is False and rec["waited_s"] == 15 and rec["at_start"]["loadavg"][0] == 8.8
    assert rec["when_started"]["loadavg"][0] == 0.3
    assert provenance.collect()["machine_load"]["at_start"]["loadavg"][0] == 8.8  # the last settle's record


@pytest.mark.parametrize("how", ["flag", "env"])
def test_busy_ok_measures_anyway_and_records_busy(tmp_path, monkeypatch, how):
    monkeypatch.delenv(machineload.ENV, raising=False)
    if how == "env":
        monkeypatch.setenv(machineload.ENV, "1")
    clock = Clock()
    rec = machineload.settle(how == "flag", max_wait_s=10, proc=fake_proc(tmp_path, 8.8, 92.5), cores=2,
                             sleep=clock.sleep, clock=clock, progress=lambda m: None)
    assert rec["busy"] is True and rec["busy_ok"] is True and "load average" in rec["busy_reason"]
    assert rec["waited_s"] == 0 and clock.t == 0  # told to go on, it does not wait
    prov = provenance.collect()["machine_load"]
    assert prov["busy"] is True and prov["checked"] is True


def test_a_quiet_machine_does_not_wait(tmp_path):
    clock = Clock()
    rec = machineload.settle(False, proc=fake_proc(tmp_path, 0.1, 0.0), cores=2, sleep=clock.sleep, clock=clock)
    assert rec["busy"] is False and rec["waited_s"] == 0 and clock.t == 0


# scripts that measure nothing: merge_results joins results, rerun_results runs hpnlab run (which settles),
# time_dilation_fit fits a results folder, prober_rules simulates the prober's judging (its figures are counts
# of simulated faults and simulated seconds; the lab gives only its path map, the switches' deterministic hash)
NOT_MEASURING = ("merge_results.py", "rerun_results.py", "time_dilation_fit.py", "prober_rules.py")
BENCH_WRITERS = sorted(p for p in (ROOT / "bench").glob("*.py") if p.name not in NOT_MEASURING)


@pytest.mark.parametrize("path", BENCH_WRITERS, ids=lambda p: p.name)
def test_every_bench_that_writes_a_result_checks_the_machine_first(path):
    """Every bench that measures settles first (machineload.settle_or_exit) and takes --busy-ok."""
    text = path.read_text()
    assert "machineload.settle_or_exit(" in text and "machineload.add_argument(" in text, path.name


def test_hpnlab_run_refuses_a_busy_machine_unless_busy_ok():
    r = subprocess.run([sys.executable, "-m", "hpnlab.cli", "run", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert "--busy-ok" in r.stdout

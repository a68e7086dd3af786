"""What a lab does on kernels older than this one: the feature check (hpnlab.machine.kernel) as data, the plans
it changes, and, as root, a lab brought up as on a kernel without the hash-seed sysctl (Debian 12's 6.1,
Ubuntu 24.04's 6.8) through HPNLAB_KERNEL_LACKS."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from hpnlab.machine import kernel
from hpnlab.node.plan import OPTIONAL_SYSCTLS, nft_ruleset, sysctls
from hpnlab.generate.render import render
from hpnlab.model.spec import load_spec, parse_spec
from hpnlab.model.topology import build
from tests.conftest import ROOT

EVERYTHING = {k: True for k in kernel.FEATURES}
DEBIAN_12 = {**EVERYTHING, "hash-seed": False}  # 6.1: has 5.14's hash fields and 5.16's egress hook
SEED = "net.ipv4.fib_multipath_hash_seed"


def spec(**kw):
    return parse_spec({"name": "k", **kw})


def test_a_modern_kernel_changes_nothing():
    a = kernel.assess(spec(), EVERYTHING, "6.18")
    assert (a.refusal, a.notes, a.skip_sysctls, a.lacks) == (None, [], [], [])


def test_without_the_hash_seed_a_shared_seed_runs_with_a_note_and_per_switch_is_refused():
    a = kernel.assess(spec(), DEBIAN_12, "6.1.0-50-amd64")
    assert a.refusal is None and a.skip_sysctls == [SEED] and a.lacks == ["hash-seed"]
    assert len(a.notes) == 1 and "6.1.0-50-amd64" in a.notes[0] and "not reproducible" in a.notes[0]
    assert kernel.assess(spec(hash={"seed": 7}), DEBIAN_12).refusal is None
    refused = kernel.assess(spec(hash={"seed": "per-switch"}), DEBIAN_12).refusal
    assert refused.startswith("spec field 'hash.seed'") and "6.11" in refused and "\n" not in refused


def test_missing_features_refuse_only_the_specs_that_need_them():
    no_egress = {**EVERYTHING, "nft-egress": False}
    assert "mechanisms.arp_duplication" in kernel.assess(spec(), no_egress).refusal
    assert kernel.assess(spec(mechanisms={"arp_duplication": False}), no_egress).refusal is None
    no_tbf = {**EVERYTHING, "tbf": False}
    assert kernel.assess(spec(), no_tbf).refusal is None
    assert "'links'" in kernel.assess(spec(links={"access": {"rate_mbit": 100}}), no_tbf).refusal
    no_bond = {**EVERYTHING, "bonding": False}
    assert kernel.assess(spec(), no_bond).refusal is None  # auto: the userspace host agent
    assert "'host_driver'" in kernel.assess(spec(host_driver="bond"), no_bond).refusal
    assert "5.14" in kernel.assess(spec(), {**EVERYTHING, "hash-fields": False}).refusal
    assert kernel.assess(spec(), {**EVERYTHING, "netem": False}).refusal is None  # only impair delay= needs it
    no_ip6 = kernel.assess(spec(), {**EVERYTHING, "nft-ip6": False}, "6.18")
    assert no_ip6.refusal is None and len(no_ip6.notes) == 1 and "Router Advertisements" in no_ip6.notes[0]


def test_the_plan_leaves_out_what_the_kernel_lacks():
    cfg = json.loads(render(build(load_spec()))["s0r0a/node.json"])
    assert SEED in sysctls(cfg)
    left = sysctls(cfg, [SEED])
    assert SEED not in left and left.keys() == sysctls(cfg).keys() - {SEED}


def test_a_bonded_host_duplicates_arp_out_of_both_ports_too():
    """On a kernel bond the host's ARP left one port, so one ToR of each set never learnt its hosts."""
    cfg = json.loads(render(build(spec(host_driver="bond")))["s0h0/node.json"])
    rules = nft_ruleset(cfg)
    assert 'hook egress device "r0p0"' in rules and 'dup to "r0p1"' in rules


def test_containerlab_topology_names_no_sysctl_a_supported_kernel_may_lack():
    """runc refuses to start a container whose sysctls: name a key the kernel lacks; the hash keys are
    set by each node at boot instead, which leaves out what its kernel lacks."""
    for name in ("default.yml", "load-balance.yml"):
        sp = load_spec(ROOT / "examples" / name)
        clab = yaml.safe_load(render(build(sp))[f"{sp.name}.clab.yml"])
        blocks = [g.get("sysctls", {}) for g in clab["topology"].get("groups", {}).values()]
        blocks += [n.get("sysctls", {}) for n in clab["topology"]["nodes"].values()]
        named = {k for b in blocks for k in b}
        assert named and not named & set(OPTIONAL_SYSCTLS), named & set(OPTIONAL_SYSCTLS)


def test_pretending_an_unknown_feature_is_missing_is_one_line(monkeypatch):
    monkeypatch.setenv("HPNLAB_KERNEL_LACKS", "hash-seed,warp-drive")
    with pytest.raises(kernel.KernelError, match="HPNLAB_KERNEL_LACKS: unknown feature 'warp-drive'"):
        kernel.probe_all()
    monkeypatch.setenv("HPNLAB_KERNEL_LACKS", "hash-seed")
    assert kernel.probe_all()["hash-seed"] is False


# --- as root: the lab as on a kernel without the hash seed ---------------------------------------------------
def _need_root():
    from tests.lib.labs import _need_lab_machine

    _need_lab_machine()


def hpn(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "hpnlab.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.root
def test_doctor_reports_every_feature_and_exits_by_the_spec(tmp_path):
    _need_root()
    r = hpn("doctor", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert [f["feature"] for f in rep["features"]] == list(kernel.FEATURES)
    assert next(f for f in rep["features"] if f["feature"] == "hash-seed")["ok"] == os.path.exists(
        "/proc/sys/net/ipv4/fib_multipath_hash_seed")
    bad = tmp_path / "ps.yml"
    bad.write_text("name: ps\nhash: {seed: per-switch}\n")
    r = hpn("doctor", str(bad), env={"HPNLAB_KERNEL_LACKS": "hash-seed"})
    assert r.returncode == 2 and "cannot run here: spec field 'hash.seed'" in r.stdout


@pytest.mark.root
@pytest.mark.kernel
def test_a_lab_on_a_kernel_without_the_hash_seed_runs_with_a_note_and_per_switch_is_refused(tmp_path):
    """Debian 12's and Ubuntu 24.04's kernels: up used to roll back on the missing sysctl."""
    _need_root()
    from tests.lib.labs import leftovers

    lacks = {"HPNLAB_KERNEL_LACKS": "hash-seed"}
    per_switch = tmp_path / "ps.yml"
    per_switch.write_text("name: kps\nsegments: 1\nhosts_per_segment: 1\nrails: 1\nhash: {seed: per-switch}\n")
    r = hpn("up", str(per_switch), env=lacks)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "spec field 'hash.seed'" in r.stderr and leftovers("kps") == []

    shared = tmp_path / "sh.yml"
    shared.write_text("name: ksh\nsegments: 1\nhosts_per_segment: 2\nrails: 1\n")
    try:
        r = hpn("up", str(shared), "--json", env=lacks)
        assert r.returncode == 0, r.stderr[-2000:]
        out = json.loads(r.stdout)
        notes = _lab_notes(out)
        assert len(notes) == 1 and "fib_multipath_hash_seed" in notes[0], out["kernel_notes"]
        checks = out["checks"]
        config = [c for c in checks if c["name"].startswith("config ")]
        assert config and all(c["ok"] and "the kernel's own key" in c["detail"] for c in config), config
        state = json.loads((kernel_state_dir("ksh") / "state.json").read_text())
        assert state["skip_sysctls"] == [SEED] and state["kernel_notes"]
    finally:
        hpn("down", "--lab", "ksh")
    assert leftovers("ksh") == []


def _lab_notes(up: dict) -> list[str]:
    """``up --json``'s kernel notes less those on this machine's shared sysctls (netdefaults.drift): any
    machine whose owner raised net.core.rmem_max, say, has those whatever the kernel lacks."""
    from hpnlab.model import netdefaults

    # A note on a shared sysctl opens with its key; whether it says "set outside hpnlab" or "raised by the labs
    # running now" depends on when it was read (this lab raises the backlog itself), so they are counted
    machine = [n for n in up["kernel_notes"] if n.startswith(tuple(netdefaults.SHARED_DEFAULTS))]
    now = netdefaults.read_shared()
    for n in machine:  # each on a key that is not at the kernel's default
        key = next(k for k in netdefaults.SHARED_DEFAULTS if n.startswith(k))
        assert netdefaults.normalise(now[key]) != netdefaults.SHARED_DEFAULTS[key], (n, now)
    return [n for n in up["kernel_notes"] if n not in machine]


def kernel_state_dir(lab: str):
    from hpnlab.runtime.base import state_dir

    return state_dir(lab)


@pytest.mark.root
def test_a_lab_on_a_kernel_without_nftables_ip6_comes_up_holding_nothing(tmp_path):
    """The Router Advertisement hold is the only use of nftables' ip6 family: without it the lab comes up as
    before the hold (its sessions as FRR's timers allow), with a note, and nothing tries to hold or release."""
    _need_root()
    from tests.lib.labs import leftovers

    f = tmp_path / "k6.yml"
    f.write_text("name: kip6\nsegments: 1\nhosts_per_segment: 2\nrails: 1\n")
    try:
        r = hpn("up", str(f), "--json", env={"HPNLAB_KERNEL_LACKS": "nft-ip6"})
        assert r.returncode == 0, r.stderr[-2000:]
        out = json.loads(r.stdout)
        notes = _lab_notes(out)
        assert len(notes) == 1 and "Router Advertisements" in notes[0], out["kernel_notes"]
        assert all(c["ok"] for c in out["checks"]), [c for c in out["checks"] if not c["ok"]]
        tables = subprocess.run(["ip", "netns", "exec", "kip6-s0r0a", "nft", "list", "tables"],
                                capture_output=True, text=True).stdout
        assert "hpnlab_ra_hold" not in tables
    finally:
        hpn("down", "--lab", "kip6")
    assert leftovers("kip6") == []


def test_without_the_hold_open_fabric_neither_removes_nor_claims_to_release_anything():
    """Root-free: the deploy's last BGP step on a kernel without nftables' ip6 family still solicits and
    waits, but runs no nft and does not say it released advertisements."""
    from types import SimpleNamespace

    from hpnlab.runtime.base import Runtime

    said, done = [], []

    class Fake:
        hold_ra = False
        fabric_learn_timeout = 1.0

        def nft_each(self, nodes, rules, what):
            done.append(("nft", rules))

        def send_solicitations(self, ifaces):
            done.append(("solicit", sorted(ifaces)))

        def wait_learnt(self, tors, uplinks):
            done.append(("wait", tors))
            return []

    iface = SimpleNamespace
    cfgs = {"t": SimpleNamespace(role="tor", fabric_ifaces=["a"], interfaces=[iface(name="a", peer="a")]),
            "a": SimpleNamespace(role="agg", fabric_ifaces=["t"], interfaces=[iface(name="t", peer="t")])}
    Runtime.open_fabric(Fake(), ["t", "a"], cfgs, said.append)
    assert done == [("solicit", ["t"]), ("wait", ["t"]), ("solicit", ["a"])]
    assert said == ["opening 1 ToRs' BGP sessions to their aggs"]


def test_shared_sysctls_off_their_defaults_are_noted_and_read_as_one_string(tmp_path):
    """netdev_max_backlog and the socket buffer caps are the machine's, not a namespace's, so ``up`` says
    when they are not the kernel's defaults (Mininet raises all three), in one short line each."""
    from hpnlab.model import netdefaults

    assert kernel.assess(spec(), EVERYTHING, "6.18", shared=dict(netdefaults.SHARED_DEFAULTS)).notes == []
    raised = {**netdefaults.SHARED_DEFAULTS, "net.core.netdev_max_backlog": "5000", "net.core.rmem_max": "16777216",
              "net.ipv4.tcp_rmem": "10240 87380 16777216"}  # hosts set their own: no note for it
    found = kernel.assess(spec(), EVERYTHING, "6.18", shared=raised)
    notes = found.notes
    assert len(notes) == 2 and "netdev_max_backlog is 5000" in notes[0] and "kernel default 1000" in notes[0]
    assert "set outside hpnlab" in notes[0] and "rmem_max 16777216" in notes[1]
    assert "raises it" in found.details[0]  # in full: what a lab does to it
    assert len(found.details) == 2 and "'sysctl -w net.core.rmem_max=212992'" in found.details[1]
    assert all(len(n) <= 100 for n in notes), notes
    (tmp_path / "net" / "ipv4").mkdir(parents=True)
    (tmp_path / "net" / "ipv4" / "tcp_rmem").write_text("4096\t131072\t6291456\n")
    assert netdefaults.read_shared(["net.ipv4.tcp_rmem", "net.core.rmem_max"], tmp_path) == {
        "net.ipv4.tcp_rmem": "4096 131072 6291456", "net.core.rmem_max": "unknown"}


def test_a_backlog_running_labs_raised_is_said_to_be_theirs_and_no_note_says_a_lab_leaves_it(tmp_path):
    """A lab raises net.core.netdev_max_backlog for its links (hpnlab.machine.neightable): a note that a lab does not
    change it would contradict the 'raised ... the input backlog' line of the same up."""
    from hpnlab.machine import neightable
    from hpnlab.model import netdefaults

    proc = tmp_path / "proc"
    (proc / "core").mkdir(parents=True)
    (proc / "core" / "netdev_max_backlog").write_text("1000\n")
    record = tmp_path / "run" / ".neigh-limits.json"
    assert neightable.held(record, proc) == {}
    assert neightable.raise_to({neightable.BACKLOG: 1920}, record, "/run/hpnlab/seg", proc) == {neightable.BACKLOG: 1920}
    held = neightable.held(record, proc)
    assert held == {"net.core.netdev_max_backlog": 1920}
    shared = {**netdefaults.SHARED_DEFAULTS, "net.core.netdev_max_backlog": "1920"}
    found = kernel.assess(spec(), EVERYTHING, "6.18", shared=shared, held=held)
    assert len(found.notes) == 1 and "raised by the labs running now" in found.notes[0], found.notes
    for by in (held, {}):  # theirs, or the machine owner's: no note says a lab leaves the backlog alone
        f = kernel.assess(spec(), EVERYTHING, "6.18", shared=shared, held=by)
        assert not any("does not change" in n or "not change it" in n for n in f.notes + f.details), f.details
    assert neightable.release(record, "/run/hpnlab/seg", lambda h: False, proc) == [neightable.BACKLOG]
    assert neightable.held(record, proc) == {}


def test_a_runs_labs_print_each_machine_note_once():
    from hpnlab.lifecycle.orchestrate import say_once
    from hpnlab.machine.progress import Progress

    lines: list[str] = []

    class Recorded(Progress):
        def __call__(self, msg: str) -> None:
            lines.append(msg)

    p = Recorded(quiet=True)
    for _variant in range(3):
        say_once(p, "note: a")
        say_once(p, "note: b")
    assert lines == ["note: a", "note: b"]

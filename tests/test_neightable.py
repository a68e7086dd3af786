"""The machine-wide neighbour table limits a lab raises: sized from the rendered lab, only ever raised,
restored by the last lab (no root: a stand-in /proc/sys/net tree)."""

import json

from hpnlab.machine import neightable
from hpnlab.model.models import NodeConfig
from hpnlab.generate.render import render
from hpnlab.model.spec import load_spec
from hpnlab.model.topology import build


def rendered(spec):
    files = render(build(spec))
    topo = json.loads(files["topology.json"])
    cfgs = {n["name"]: NodeConfig.model_validate_json(files[f"{n['name']}/node.json"]) for n in topo["nodes"]}
    return topo, cfgs


def test_entries_needed_counts_fabric_ends_and_subnet_peers():
    topo, cfgs = rendered(load_spec())  # 2 segments x 2 hosts x 2 rails, 2 aggs per plane
    need = neightable.entries_needed(topo, cfgs)
    # 8 ToRs x 2 uplinks = 16 fabric links; 2 ends each
    assert need["ipv6"] == 32
    # 16 access links; 4 subnets (segments x rails) of 2 hosts: each host resolves 1 peer on 2 ports
    assert need["ipv4"] == 2 * 16 + 32 + 4 * 2 * 1 * 2


def test_full_segment_needs_more_than_the_kernel_default():
    topo, cfgs = rendered(load_spec("segment-full"))
    need = neightable.entries_needed(topo, cfgs)
    assert need["ipv6"] == 2 * 960 > 1024  # the default gc_thresh3 this lab overflowed
    assert need["ipv4"] == 2 * 3008 + 8 * 128 * 127 * 2


def test_the_input_backlog_grows_with_the_links_and_never_below_the_kernels():
    topo, _ = rendered(load_spec())
    assert neightable.backlog(topo) == {"core/netdev_max_backlog": 1000}  # 32 links: the kernel's default
    topo, _ = rendered(load_spec("segment-full"))
    assert neightable.backlog(topo) == {"core/netdev_max_backlog": 30080}  # the 30,000 measured to drop none


def test_the_backlog_is_raised_and_restored_with_the_neighbour_limits(tmp_path):
    root, record = fake_proc(tmp_path), tmp_path / "run" / "neigh.json"
    (root / "core").mkdir()
    (root / "core" / "netdev_max_backlog").write_text("1000\n")
    want = {**neightable.thresholds({"ipv4": 10, "ipv6": 10}), "core/netdev_max_backlog": 30080}
    assert neightable.raise_to(want, record, "/run/a", root)["core/netdev_max_backlog"] == 30080
    assert neightable.read("core/netdev_max_backlog", root) == 30080
    assert "core/netdev_max_backlog" in neightable.release(record, "/run/a", always, root)
    assert neightable.read("core/netdev_max_backlog", root) == 1000 and not record.exists()


def fake_proc(tmp_path, value=5000):
    for fam in ("ipv4", "ipv6"):
        d = tmp_path / "proc" / fam / "neigh" / "default"
        d.mkdir(parents=True)
        for i, v in ((1, 128), (2, 512), (3, value)):
            (d / f"gc_thresh{i}").write_text(f"{v}\n")
    return tmp_path / "proc"


def always(_holder):
    return True


def test_raise_only_and_restore_by_the_last_lab(tmp_path):
    root, record = fake_proc(tmp_path), tmp_path / "run" / "neigh.json"
    small = neightable.thresholds({"ipv4": 10, "ipv6": 10})
    big = neightable.thresholds({"ipv4": 100000, "ipv6": 2000})
    assert neightable.raise_to(small, record, "/run/a", root) == {k: v for k, v in small.items() if "thresh3" not in k}
    assert neightable.read("ipv4/neigh/default/gc_thresh3", root) == 5000  # never lowered
    neightable.raise_to(big, record, "/run/b", root)  # a second, larger lab
    assert neightable.read("ipv4/neigh/default/gc_thresh3", root) == 4 * (100000 + neightable.SLACK)
    assert neightable.release(record, "/run/b", always, root) == []  # lab a still runs on them
    assert neightable.read("ipv4/neigh/default/gc_thresh3", root) == 4 * (100000 + neightable.SLACK)
    # someone else changes one value meanwhile: left alone
    (root / "ipv6/neigh/default/gc_thresh1").write_text("7777")
    restored = neightable.release(record, "/run/a", always, root)
    assert "ipv6/neigh/default/gc_thresh1" not in restored
    assert neightable.read("ipv6/neigh/default/gc_thresh1", root) == 7777
    for fam in ("ipv4", "ipv6"):
        assert neightable.read(f"{fam}/neigh/default/gc_thresh3", root) == 5000
        assert neightable.read(f"{fam}/neigh/default/gc_thresh2", root) == 512
    assert neightable.read("ipv4/neigh/default/gc_thresh1", root) == 128
    assert not record.exists() and list(record.parent.iterdir()) == []  # no lock or temporary file left


def test_the_values_first_found_come_back_whichever_lab_goes_last(tmp_path):
    """The leak this record once had: a lab that found the limits already raised by another kept that
    raised value as the one to put back. One record, shared and locked, keeps the machine's own."""
    root, record = fake_proc(tmp_path), tmp_path / "run" / "neigh.json"
    neightable.raise_to(neightable.thresholds({"ipv4": 3000, "ipv6": 10}), record, "/run/x", root)
    neightable.raise_to(neightable.thresholds({"ipv4": 9000, "ipv6": 10}), record, "/tmp/y", root)
    neightable.release(record, "/run/x", always, root)  # the first lab goes first
    neightable.release(record, "/tmp/y", always, root)
    assert [neightable.read(f"ipv4/neigh/default/gc_thresh{i}", root) for i in (1, 2, 3)] == [128, 512, 5000]
    assert not record.exists()


def test_a_holder_whose_state_is_gone_does_not_keep_the_limits_raised(tmp_path):
    root, record = fake_proc(tmp_path), tmp_path / "run" / "neigh.json"
    big = neightable.thresholds({"ipv4": 9000, "ipv6": 10})
    neightable.raise_to(big, record, "/run/killed", root)  # its state was later removed by hand
    neightable.raise_to(big, record, "/run/live", root)
    assert neightable.release(record, "/run/live", lambda h: h != "/run/killed", root)
    assert neightable.read("ipv4/neigh/default/gc_thresh3", root) == 5000 and not record.exists()


def test_a_record_of_the_earlier_format_is_still_restored(tmp_path):
    root, record = fake_proc(tmp_path), tmp_path / "neigh.json"
    (root / "ipv4/neigh/default/gc_thresh3").write_text("9999")
    record.write_text(json.dumps({"ipv4/neigh/default/gc_thresh3": [5000, 9999]}))  # no holders in it
    assert neightable.release(record, "/run/z", always, root) == ["ipv4/neigh/default/gc_thresh3"]
    assert neightable.read("ipv4/neigh/default/gc_thresh3", root) == 5000


def test_damaged_record_restores_nothing(tmp_path):
    root, record = fake_proc(tmp_path), tmp_path / "neigh.json"
    record.write_text("{not json")
    assert neightable.release(record, "/run/z", always, root) == [] and not record.exists()
    record.write_text(json.dumps({"/etc/passwd": [1, 2]}))  # only the known keys are ever written
    assert neightable.release(record, "/run/z", always, root) == []


def test_the_record_is_the_machines_whatever_the_state_root(tmp_path):
    """Labs under another state root (HPNLAB_STATE_ROOT, as the containerlab stand-in tests use) share
    the kernel and so the record: with one record per root, each took the other's raise for the original."""
    import os
    import subprocess
    import sys

    code = "from hpnlab.runtime import base; print(base.NEIGH_RECORD, base.STATE_ROOT)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "HPNLAB_STATE_ROOT": str(tmp_path)}).stdout.split()
    assert out == ["/run/hpnlab/.neigh-limits.json", str(tmp_path)]

"""Link capacity, switch hashing, the path map and elephant flows on a real shaped lab (the load-balance
lab of examples/load-balance.yml: 2 segments x 4 hosts, 4 aggs per plane, 20 Mbit/s links).

Bounds are generous (shared 2-core machines); the figures themselves are in results/load-balance.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

import pytest

from tests.lib.labs import hpnlab, owned_lab

LAB = "bal"
pytestmark = [pytest.mark.root, pytest.mark.hpnlab(spec="load-balance", name=LAB)]


@pytest.fixture(scope="module")
def lab(hpnlab_lab):
    yield from owned_lab(hpnlab_lab)


@pytest.fixture(scope="module")
def pathmap(lab):
    from hpnlab.traffic.run import balance

    return balance.probe_map(lab.runtime, lab.cfgs, 0, 16, 5300, "tcp")


def test_capacity_and_hash_are_in_the_kernel_and_verify_checks_them(lab):
    qd = json.loads(lab.exec("s0r0a", "tc", "-j", "qdisc", "show", "dev", "h0p0", check=True).stdout)
    assert qd[0]["kind"] == "tbf" and qd[0]["options"]["rate"] * 8 == 20_000_000
    seed = lab.exec("agg0-0", "sysctl", "-n", "net.ipv4.fib_multipath_hash_seed", check=True).stdout.strip()
    assert int(seed) == lab.cfgs["agg0-0"].sysctls["net.ipv4.fib_multipath_hash_seed"]
    # same seed on every switch (seed: shared), a different one on each host
    seeds = {n: lab.cfgs[n].sysctls["net.ipv4.fib_multipath_hash_seed"] for n in lab.nodes}
    assert len({seeds[n] for n in lab.routers}) == 1
    assert len({seeds[n] for n in lab.hosts}) == len(lab.hosts)
    # verify notices a switch whose seed is not the spec's, and a link end whose tbf is gone
    from hpnlab.lifecycle.verify import check_config

    lab.exec("agg0-1", "sysctl", "-q", "-w", "net.ipv4.fib_multipath_hash_seed=7", check=True)
    lab.exec("s1r0b", "tc", "qdisc", "del", "dev", "h2p1", "root", check=True)
    try:
        bad = {c["name"]: c for c in check_config(lab.runtime, lab.cfgs) if not c["ok"]}
        assert set(bad) == {"config agg0-1", "config s1r0b"}, bad
        assert "seed" in bad["config agg0-1"]["detail"] and "h2p1" in bad["config s1r0b"]["detail"]
    finally:
        lab.exec("agg0-1", "sysctl", "-q", "-w", f"net.ipv4.fib_multipath_hash_seed={seeds['agg0-1']}", check=True)
        subprocess.run(["tc", "-n", f"{LAB}-s1r0b", "-batch", "-"], check=True, text=True,
                       input="qdisc replace dev h2p1 root handle 1: tbf rate 20000kbit burst 3028 limit 262144\n")
    assert all(c["ok"] for c in check_config(lab.runtime, lab.cfgs))


def test_path_map_reaches_the_far_tor_and_dual_plane_keeps_each_flow_in_its_plane(lab, pathmap):
    from hpnlab.traffic.run import balance

    rows = balance.complete(pathmap)
    assert len(rows) >= 0.95 * len(pathmap)  # every hop of (almost) every probe answered
    # ToRs carry their plane in node.json; an agg's is in its name (agg<plane>-<i>)
    plane = {n: c.plane if c.plane is not None else (int(n[3]) if n.startswith("agg") else None)
             for n, c in lab.cfgs.items()}
    for r in rows:
        assert plane[r["tor"]] == plane[r["agg"]] == plane[r["dst_tor"]], r  # port 0 stays in plane 0
        assert r["dst_tor"] in lab.cfgs[r["dst"]].nics[0].tors
    # the map is a function: probing the same 5-tuples again gives the same paths
    again = balance.probe_map(lab.runtime, lab.cfgs, 0, 4, 5300, "tcp")
    first = {(r["src"], r["dst"], r["sport"]): r for r in pathmap}
    same = [first[(r["src"], r["dst"], r["sport"])] == r for r in balance.complete(again)]
    assert sum(same) >= 0.95 * len(same)


def test_disjoint_selection_evens_the_downlinks_on_the_map(lab, pathmap):
    from hpnlab.traffic.run import balance

    hashed = balance.analyse(pathmap, lab.cfgs, sets=50, select="hash")
    disjoint = balance.analyse(pathmap, lab.cfgs, sets=50, select="disjoint")
    assert disjoint["downlink_ratio"]["max"] == 1.0
    assert hashed["downlink_ratio"]["max"] is None or hashed["downlink_ratio"]["max"] > 1.0


def test_link_capacity_limits_a_flow_and_the_queue_shows_in_the_counters(lab, pathmap, tmp_path):
    """Two hosts send 4 flows each into one NIC's port: 40 Mbit/s offered to a 20 Mbit/s ToR port."""
    from hpnlab.traffic.run import balance

    by = balance.index(pathmap)
    dst = "s1h0"
    flows = []
    for src in ("s0h0", "s0h1"):  # source ports whose paths end on ToR a's port to s1h0
        flows += [r for r in by[(src, dst)] if r["dst_tor"] == "s1r0a"][:2]
    assert len(flows) == 4
    t0 = time.time() + 1.0
    ip = {h: lab.host_ip(h) for h in ("s0h0", "s0h1", dst)}
    size = 2 * 1024 * 1024
    py = sys.executable
    procs = [subprocess.Popen(lab.runtime.exec_argv(dst, [py, "-m", "hpnlab.node.programs.elephant", "serve", "--bind", ip[dst],
                                                         "--duration", "15", "--out", str(tmp_path / "rx.json")]))]
    stats = subprocess.Popen(lab.runtime.exec_argv("s1r0a", [py, "-m", "hpnlab.node.linkstats", "--ifaces", "h0p0",
                                                             "--interval", "0.05", "--duration", "8",
                                                             "--out", str(tmp_path / "ls.json")]))
    for src in ("s0h0", "s0h1"):
        mine = ",".join(f"{ip[dst]}:{r['sport']}" for r in flows if r["src"] == src)
        procs.append(subprocess.Popen(lab.runtime.exec_argv(src, [
            py, "-m", "hpnlab.node.programs.elephant", "send", "--src", ip[src], "--flows", mine, "--size", str(size),
            "--duration", "14", "--start-at", f"{t0:.3f}", "--out", str(tmp_path / f"tx-{src}.json")])))
    for p in procs[1:]:
        assert p.wait(timeout=30) == 0
    stats.wait(timeout=30)
    procs[0].terminate()
    procs[0].wait(timeout=10)
    tx = [json.loads((tmp_path / f"tx-{s}.json").read_text()) for s in ("s0h0", "s0h1")]
    assert all(t["complete"] for t in tx)
    took = max(t["completion_s"] for t in tx)
    # 8 MiB through one 20 Mbit/s port needs >= 3.36 s; unshaped veths would take well under a second
    assert took >= 3.2, took
    ls = json.loads((tmp_path / "ls.json").read_text())["ifaces"]["h0p0"]
    assert max(ls["backlog"]) > 10_000  # two senders into one port: a standing queue
    assert ls["bytes"][-1] - ls["bytes"][0] >= 4 * size


def test_impair_changes_one_link_and_clear_restores_the_spec(lab):
    r = hpnlab("impair", "s0r0a", "h0p0", "rate=5mbit", "loss=2", "--lab", LAB)
    assert r.returncode == 0, r.stderr
    qd = json.loads(lab.exec("s0r0a", "tc", "-j", "qdisc", "show", "dev", "h0p0", check=True).stdout)
    assert qd[0]["options"]["rate"] * 8 == 5_000_000
    assert "hpnlab_impair_h0p0" in lab.exec("s0r0a", "nft", "list", "tables", check=True).stdout
    from hpnlab.lifecycle.orchestrate import open_lab

    assert "s0r0a:h0p0" in open_lab(LAB)[0].state.data.impairments  # recorded for --clear / a crash
    r = hpnlab("impair", "s0r0a", "h0p0", "delay=10ms", "--lab", LAB, check=False)
    qd = json.loads(lab.exec("s0r0a", "tc", "-j", "qdisc", "show", "dev", "h0p0", check=True).stdout)
    if r.returncode == 0:  # a kernel with netem (GitHub's runners): under the tbf
        assert any(q["kind"] == "netem" for q in qd)
    else:  # this project's CI kernel: one line saying why, and the impairment in force stays as it was
        assert r.returncode == 1 and "netem" in r.stderr and len(r.stderr.strip().splitlines()) == 1
        assert qd[0]["options"]["rate"] * 8 == 5_000_000
    r = hpnlab("impair", "--clear", "--lab", LAB)
    assert r.returncode == 0 and "s0r0a:h0p0" in r.stdout
    qd = json.loads(lab.exec("s0r0a", "tc", "-j", "qdisc", "show", "dev", "h0p0", check=True).stdout)
    assert qd[0]["options"]["rate"] * 8 == 20_000_000
    assert "hpnlab_impair" not in lab.exec("s0r0a", "nft", "list", "tables", check=True).stdout
    assert lab.healthy()


@pytest.mark.parametrize("args, field", [(["rate=fast"], "rate"), (["loss=0"], "loss"), (["mtu=9000"], "KEY"),
                                         (["queue=64"], "queue"), (["s0r0a"], "impair")])
def test_impair_bad_input_is_one_line_exit_2(lab, args, field):
    r = hpnlab("impair", "s0r0a", "h0p0", *args, "--lab", LAB, check=False) if args[0] != "s0r0a" else \
        hpnlab("impair", "s0r0a", "--lab", LAB, check=False)
    assert r.returncode == 2 and field in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_after_an_uplink_fails_only_that_tors_flows_are_probed_again(lab, pathmap):
    """Disjoint selection recomputed after a failure: the ToR's ECMP group changed, nothing else did."""
    from hpnlab.traffic.run import balance

    with lab.fault("link-down", "s0r0a", "agg0-0"):
        lab.wait_for(lambda: "10.0.0.0/24" not in lab.routes("agg0-0") or None, timeout=10)
        new, probes = balance.reprobe(lab.runtime, lab.cfgs, pathmap, "s0r0a", 0, 5300)
        assert 0 < probes < len(pathmap)  # a fraction of the map, not all of it
        used = [r for r in balance.complete(new) if {r["tor"], r["dst_tor"]} & {"s0r0a"}]
        assert used and all(r["agg"] != "agg0-0" for r in used)  # nothing crosses the dead link any more
        flows = balance.choose(balance.index(new), lab.cfgs, 2, "disjoint", random.Random(5))
        assert all(not ({r["tor"], r["dst_tor"]} & {"s0r0a"} and r["agg"] == "agg0-0") for r in flows)
        # a flow that neither leaves nor enters by s0r0a kept its path: probe a few again to check
        others = [r for r in pathmap if "s0r0a" not in (r["tor"], r["dst_tor"]) and r["src"] == "s1h0"][:8]
        again = balance.probe_map(lab.runtime, lab.cfgs, 0, 16, 5300, "tcp")
        now = {(r["src"], r["dst"], r["sport"]): r for r in again}
        assert sum(now[(r["src"], r["dst"], r["sport"])] == r for r in others) >= len(others) - 1
    lab.wait_healthy(60)

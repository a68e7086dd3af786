"""Root-free tests of the spec's qos: its checks (one line naming the field, exit 2), what each switch's
plan gets (htb classes or a strict-priority qdisc under a tbf, a bfifo per queue, the nftables DSCP map),
that a spec without it renders as before, the kernel check, verify's reading of a port, and the per-queue
figures of the link-stats sampler."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest

from hpnlab.machine import kernel
from hpnlab.model import qos as qosspec
from hpnlab.errors import SpecError
from hpnlab.node import plan
from hpnlab.node import linkstats
from hpnlab.node import qos
from hpnlab.model.spec import parse_spec
from hpnlab.traffic.run.experiment import node_configs

SHAPED = {"links": {"access": {"rate_mbit": 40}, "uplink": {"rate_mbit": 20, "queue_kb": 64}}}
EVERYTHING = {k: True for k in kernel.FEATURES}


def spec(**kw):
    return parse_spec({"name": "q", **SHAPED, **kw})


@pytest.mark.parametrize("given,msg", [
    ({"queues": 9}, "spec field 'qos.queues': Input should be less than or equal to 8"),
    ({"queues": 0}, "spec field 'qos.queues': Input should be greater than or equal to 1"),
    ({"queues": 2, "dscp": {46: 2}}, "spec field 'qos': dscp 46 maps to queue 2, but queues are 0..1 (queues: 2)"),
    ({"dscp": {64: 0}}, "spec field 'qos.dscp': DSCP 64 is not in 0..63"),
    ({"dscp": {"gold": 0}}, "spec field 'qos.dscp': DSCP 'gold' is not 0..63 or a name"),
    ({"dscp": {"ef": 0, 46: 1}}, "spec field 'qos.dscp': DSCP 46 is given twice"),
    ({"queues": 4, "default_queue": 4}, "spec field 'qos': default_queue 4 is not one of the queues 0..3"),
    ({"queues": 8, "min_rate_pct": 20}, "spec field 'qos': min_rate_pct 20 x 8 queues guarantees more"),
    ({"scheduler": "prio", "queues": 1}, "spec field 'qos': scheduler prio needs queues >= 2"),
    ({"scheduler": "wfq"}, "spec field 'qos.scheduler': Input should be 'htb', 'prio' or 'ets'"),
    ({"queue": 4}, "spec field 'qos.queue': unknown key"),
])
def test_a_bad_qos_is_one_line_naming_the_field(given, msg):
    with pytest.raises(SpecError) as e:
        spec(qos=given)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_qos_needs_shaped_links():
    with pytest.raises(SpecError) as e:
        parse_spec({"name": "q", "qos": {"queues": 2}})
    assert "spec field 'qos': needs shaped links to queue on" in str(e.value)


def test_the_cli_refuses_a_bad_qos_with_exit_2_and_no_traceback(tmp_path):
    p = tmp_path / "s.yml"
    p.write_text("name: q\nlinks: {uplink: {rate_mbit: 20}}\nqos: {queues: 2, dscp: {ef: 3}}\n")
    r = subprocess.run([sys.executable, "-m", "hpnlab", "generate", str(p), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "qos" in r.stderr and "maps to queue 3" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_names_and_numbers_map_to_the_same_code_points():
    q = spec(qos={"queues": 3, "dscp": {"ef": 0, "AF41": 1, "cs1": 2, "10": 1}}).qos
    assert q.dscp == {46: 0, 34: 1, 8: 2, 10: 1}
    assert q.node_json() == {"queues": 3, "scheduler": "htb", "dscp": {"8": 2, "10": 1, "34": 1, "46": 0},
                             "default_queue": 2, "queue_bytes": None, "min_rate_pct": 1.0}


def test_every_shaped_switch_port_gets_the_queues_and_hosts_keep_their_tbf():
    cfgs = {n: c.plain() for n, c in node_configs(spec(qos={"queues": 3, "dscp": {46: 0, 34: 1}})).items()}
    tor, agg, host = cfgs["s0r0a"], cfgs["agg0-0"], cfgs["s0h0"]
    assert "qos" not in host and plan.tc_batch(host)[0].split()[7] == "tbf"
    for cfg in (tor, agg):
        lines = plan.tc_batch(cfg)
        shaped = [i for i in cfg["interfaces"] if i.get("shape")]
        assert len(shaped) == len(cfg["interfaces"])  # both link classes are shaped: every port queues
        for i in shaped:
            mine = [ln for ln in lines if f" dev {i['name']} " in ln]
            rate = i["shape"]["rate_kbit"]
            assert mine[0] == f"qdisc replace dev {i['name']} root handle 1: htb default 12"
            assert f"classid 1:1 htb rate {rate}kbit ceil {rate}kbit" in mine[1]
            classes = [ln for ln in mine if "classid 1:1" in ln and "parent 1:1 " in ln]
            assert [ln.split(" prio ")[1].split()[0] for ln in classes] == ["0", "1", "2"]
            assert all(f"rate {max(1, round(rate / 100))}kbit ceil {rate}kbit" in ln for ln in classes)
            leaves = [ln for ln in mine if "bfifo" in ln]
            assert leaves == [f"qdisc replace dev {i['name']} parent 1:1{k} handle 1{k}: bfifo limit "
                              f"{i['shape']['queue_bytes']}" for k in range(3)]
        rules = plan.nft_ruleset(cfg)
        assert "table ip hpnlab_qos" in rules and "meta priority set ip dscp map { 34 : 1:11, 46 : 1:10 }" in rules
    # the ToR's access ports have their own class's rate and queue (40 Mbit/s, 256 KB)
    hp = next(i for i in tor["interfaces"] if i["kind"] == "access")
    assert any(f"dev {hp['name']} parent 1:12 handle 12: bfifo limit {256 * 1024}" in ln for ln in plan.tc_batch(tor))


def test_queue_kb_sizes_every_queue_and_prio_and_ets_go_under_a_tbf():
    cfg = node_configs(spec(qos={"queues": 2, "scheduler": "ets", "queue_kb": 32, "default_queue": 0}))["agg0-0"].plain()
    dev = cfg["interfaces"][0]["name"]
    lines = [ln for ln in plan.tc_batch(cfg) if f" dev {dev} " in ln]
    assert lines == [f"qdisc replace dev {dev} root handle 1: tbf rate 20000kbit burst 3028 limit 65536",
                     f"qdisc replace dev {dev} parent 1:1 handle 2: ets bands 2 strict 2 priomap " + " ".join(["0"] * 16),
                     f"qdisc replace dev {dev} parent 2:1 handle 10: bfifo limit 32768",
                     f"qdisc replace dev {dev} parent 2:2 handle 11: bfifo limit 32768"]
    assert qos.class_of(cfg["qos"], 1) == "2:2"
    prio = node_configs(spec(qos={"queues": 2, "scheduler": "prio"}))["agg0-0"].plain()
    assert f"qdisc replace dev {dev} parent 1:1 handle 2: prio bands 2 priomap " + " ".join(["1"] * 16) \
        in plan.tc_batch(prio)


def test_without_qos_the_plan_is_unchanged():
    """Default off: the same tbf lines and no qos table (the golden files check the rendered files)."""
    cfgs = node_configs(spec())
    for c in cfgs.values():
        cfg = c.plain()
        assert "qos" not in cfg
        assert plan.tc_batch(cfg) == [" ".join(["qdisc", "replace", "dev", i["name"], "root", "handle", "1:",
                                                 *plan.tbf_args(i["shape"])]) for i in cfg["interfaces"] if i.get("shape")]
        assert "hpnlab_qos" not in (plan.nft_ruleset(cfg) or "")


def test_an_empty_map_leaves_every_packet_in_the_default_queue_without_a_table():
    cfg = node_configs(spec(qos={"queues": 2}))["s0r0a"].plain()
    assert "hpnlab_qos" not in (plan.nft_ruleset(cfg) or "") and any("htb default 11" in ln for ln in plan.tc_batch(cfg))


def test_the_ruleset_is_valid_nft_syntax():
    cfg = node_configs(spec(qos={"queues": 8, "dscp": {k: k % 8 for k in range(0, 64, 3)}}))["agg0-0"].plain()
    text = qos.nft_ruleset(cfg)
    r = subprocess.run(["nft", "--check", "-f", "-"], input=text, capture_output=True, text=True)
    if r.returncode and ("Operation not permitted" in r.stderr or "Could not process rule" in r.stderr):
        print(f"nft --check unavailable here: {r.stderr.strip()[:100]}; syntax checked by string only")
    else:
        assert r.returncode == 0, r.stderr


def test_the_kernel_check_refuses_a_scheduler_the_kernel_lacks():
    s = spec(qos={"queues": 2, "scheduler": "prio"})
    assert kernel.assess(s, EVERYTHING, "6.18").refusal is None
    refused = kernel.assess(s, {**EVERYTHING, "prio": False}, "6.18").refusal
    assert refused.startswith("spec field 'qos.scheduler': 'prio' needs the prio qdisc") and "htb" in refused
    assert "remove 'qos'" in kernel.assess(spec(qos={}), {**EVERYTHING, "htb": False}, "6.1").refusal
    assert kernel.assess(spec(), {**EVERYTHING, "htb": False, "prio": False, "ets": False}, "6.1").refusal is None


def test_verify_reads_a_port_s_queues_back():
    q = spec(qos={"queues": 2}).qos.node_json()
    shape = {"rate_kbit": 20000, "queue_bytes": 65536}
    good = [{"kind": "htb", "handle": "1:", "dev": "x", "root": True, "options": {}},
            {"kind": "bfifo", "handle": "10:", "dev": "x", "parent": "1:10", "options": {"limit": 65536}},
            {"kind": "bfifo", "handle": "11:", "dev": "x", "parent": "1:11", "options": {"limit": 65536}}]
    assert qosspec.port_problems("x", shape, q, good) == []
    assert "tbf qdisc, spec says qos htb" in qosspec.port_problems("x", shape, q, [{"kind": "tbf", "root": True}] + good[1:])[0]
    assert "queues [0] of [65536] B, spec says 2" in qosspec.port_problems("x", shape, q, good[:2])[0]


def _qdisc_msg(ifindex: int, handle: int, parent: int, kind: str, sent: int, drops: int, backlog: int) -> bytes:
    def attr(t, v):
        return struct.pack("HH", 4 + len(v), t) + v + b"\0" * ((4 - len(v) % 4) % 4)
    stats = attr(linkstats.TCA_STATS_BASIC, struct.pack("QI", sent, 10) + b"\0" * 4) + \
        attr(linkstats.TCA_STATS_QUEUE, struct.pack("IIIII", 1, backlog, drops, 0, 0))
    return linkstats.TCMSG.pack(0, ifindex, handle, parent, 0) + attr(linkstats.TCA_KIND, kind.encode() + b"\0") + \
        attr(linkstats.TCA_STATS2, stats)


def test_the_sampler_reads_each_queue_s_bytes_drops_and_backlog():
    root = linkstats.parse_qdisc(_qdisc_msg(3, 0x10000, linkstats.TC_H_ROOT, "htb", 900, 5, 3000))
    leaf = linkstats.parse_qdisc(_qdisc_msg(3, 0x110000, 0x10011, "bfifo", 400, 2, 1514))
    other = linkstats.parse_qdisc(_qdisc_msg(3, 0x20000, 0x10001, "prio", 1, 1, 1))
    assert root == (3, {"kind": "htb", "bytes": 900, "packets": 10, "drops": 5, "backlog": 3000, "qlen": 1, "queue": None})
    assert leaf[1]["queue"] == 1 and (leaf[1]["bytes"], leaf[1]["drops"], leaf[1]["backlog"]) == (400, 2, 1514)
    assert other is None  # prio/ets's band qdisc is not a queue: its bands' bfifos are


def test_degrade_and_impair_s_restore_keep_a_port_s_queues():
    """A degraded port's queues take the lower rate and stay; what restores a port (degrade's revert,
    impair's clear) builds the same tree as the plan."""
    from hpnlab.model import capacity
    from hpnlab.traffic.faults.link import degrade

    cfg = node_configs(spec(qos={"queues": 2}))["agg0-0"].plain()
    ifc = cfg["interfaces"][0]
    low = {**ifc["shape"], "rate_kbit": 5000}
    argvs = capacity.port_argvs(cfg, ifc["name"], low, rates_only=True)  # degrade: htb's classes only
    assert all(a[:3] == ["tc", "class", "replace"] for a in argvs) and len(argvs) == 3
    assert all("ceil 5000kbit" in " ".join(a) for a in argvs)
    full = capacity.port_argvs(cfg, ifc["name"], ifc["shape"])  # impair's clear: the tree anew
    assert full[0] == ["tc", "qdisc", "del", "dev", ifc["name"], "root"]
    assert [" ".join(a[1:]) for a in full[1:]] == [ln for ln in plan.tc_batch(cfg) if f" dev {ifc['name']} " in ln]
    ets = node_configs(spec(qos={"queues": 2, "scheduler": "ets"}))["agg0-0"].plain()
    assert capacity.port_argvs(ets, ifc["name"], low, rates_only=True) == \
        [["tc", "qdisc", "replace", "dev", ifc["name"], "root", "handle", "1:", "tbf", "rate", "5000kbit", "burst",
          "3028", "limit", str(2 * ifc["shape"]["queue_bytes"])]]
    host = node_configs(spec(qos={"queues": 2}))["s0h0"].plain()
    assert capacity.port_argvs(host, "r0p0", low) == [["tc", "qdisc", "replace", "dev", "r0p0", "root", "handle", "1:",
                                                        *plan.tbf_args(low)]]
    assert degrade.port_argvs is capacity.port_argvs

"""Gray failures, root-free: the gray fault kinds' parsing and validation (one-line errors naming the
field, exit 2 from the CLI), the nftables they load (checked by nft itself where it can parse offline), and
the tc commands of bursty-loss's netem fallback (kernels without nft dynset)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from hpnlab.errors import SpecError
from hpnlab.traffic import faults
from hpnlab.traffic.run import experiment
from hpnlab.traffic.faults.gray import bursty_loss, wire
from tests.conftest import ROOT

GRAY = ["silent-loss", "corrupt", "silent-corrupt", "bursty-loss"]


@pytest.fixture(scope="module")
def cfgs():
    return experiment.load(ROOT / "experiments" / "link-failure.yml").plans[0].cfgs


def test_gray_kinds_are_registered_and_listed():
    for k in GRAY:
        assert k in faults.KINDS and faults.get(k).needs_iface


def test_gray_fault_hits_the_peer_ingress_and_both_adds_the_own(cfgs):
    f = faults.parse({"kind": "silent-loss", "node": "s0r0a", "iface": "agg0-0", "rate": 1}, "f", cfgs)
    peer = cfgs["s0r0a"].iface("agg0-0")
    assert wire.ends(cfgs, f) == [[peer.peer, peer.peer_iface]]
    f2 = faults.parse({"kind": "corrupt", "node": "s0r0a", "iface": "agg0-0", "both": 1}, "f", cfgs)
    assert wire.ends(cfgs, f2) == [[peer.peer, peer.peer_iface], ["s0r0a", "agg0-0"]]
    assert f2.label == "corrupt s0r0a:agg0-0 rate=1 both=1"


BAD = [
    ({"kind": "silent-loss", "rate": 0}, "f.rate: give a percentage"),
    ({"kind": "silent-loss", "rate": 101}, "f.rate: give a percentage"),
    ({"kind": "silent-loss", "rate": 0.001}, "f.rate: 0.001 % is below the resolution"),
    ({"kind": "corrupt", "both": 2}, "f.both: give 0"),
    ({"kind": "silent-corrupt", "rate": "x"}, "f.rate: give a number"),
    ({"kind": "silent-loss", "loss": 1}, "f.loss: unknown field for silent-loss"),
    ({"kind": "bursty-loss", "r": 0}, "f.r: give a percentage"),
    ({"kind": "bursty-loss", "bad_loss": 120}, "f.bad_loss: give a percentage from 0 to 100"),
    ({"kind": "bursty-loss", "bad_loss": 5, "good_loss": 5}, "f.bad_loss: the bad state must lose more"),
    ({"kind": "silent-loss", "iface": ["agg0-0", "agg0-1"]}, "f.iface: a gray fault acts on one link"),
]


@pytest.mark.parametrize("extra,msg", BAD, ids=[m for _e, m in BAD])
def test_bad_gray_faults_fail_with_one_line(cfgs, extra, msg):
    d = {"node": "s0r0a", "iface": "agg0-0", **extra}
    with pytest.raises(SpecError) as e:
        faults.parse(d, "f", cfgs)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_gray_fault_refuses_offload_buffers(cfgs):
    withoff = {k: v.model_copy(update={"offloads": True}) if k == "agg0-0" else v for k, v in cfgs.items()}
    with pytest.raises(SpecError) as e:
        faults.parse({"kind": "silent-loss", "node": "s0r0a", "iface": "agg0-0"}, "f", withoff)
    assert "acts per MTU frame, but agg0-0 keeps 64 KB offload buffers" in str(e.value)


def test_bursty_loss_without_dynset_or_netem_is_refused(cfgs, monkeypatch):
    monkeypatch.setenv("HPNLAB_KERNEL_LACKS", "nft-dynset,netem")
    with pytest.raises(SpecError) as e:
        faults.parse({"kind": "bursty-loss", "node": "s0r0a", "iface": "agg0-0"}, "f", cfgs)
    assert "needs nftables' set delete from the packet path" in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setenv("HPNLAB_KERNEL_LACKS", "nft-dynset")
    assert bursty_loss.use_netem()


def test_gray_rules_draw_per_frame():
    assert wire.draw(1) == "numgen random mod 10000 < 100 " and wire.draw(0.01).endswith("< 1 ")
    assert wire.draw(100) == ""
    text = bursty_loss.ge_rules("t", "eth0", 1, 30, 100, 0)
    assert "meta iif @bad goto bad" in text and "< 3000 delete @bad" in text and "< 100 add @bad" in text
    assert text.count("drop") == 1  # good_loss 0: the good state loses nothing
    if shutil.which("nft"):
        # nft -c parses and checks without a kernel change (as root it still touches nothing)
        for t in (text, wire.table_rules("t", "eth0", ["numgen random mod 10000 < 100 counter drop"])):
            r = subprocess.run(["nft", "-c", "-f", "-"], input=t, capture_output=True, text=True)
            assert r.returncode == 0 or "eth0" in r.stderr, r.stderr


def test_cli_fail_param_errors_exit_2_without_traceback():
    r = subprocess.run([sys.executable, "-m", "hpnlab.cli", "fail", "silent-loss", "s0r0a", "agg0-0",
                        "--param", "rate", "--lab", "nolab-g39"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "fail --param 'rate': give KEY=NUMBER" in r.stderr


class _Rt:
    """Records the commands a fault would run (node, argv), runs nothing."""

    def __init__(self):
        self.calls: list[tuple[str, list[str]]] = []

    def run(self, node, argv, check=True, what=None, **kw):
        self.calls.append((node, list(argv)))


class _Inj:
    def __init__(self, cfgs):
        self.cfgs, self.rt, self.nfts = cfgs, _Rt(), []

    def nft(self, node, rules, what):
        self.nfts.append((node, rules))


def _bursty_plan(cfgs, **params):
    """prepare, apply and revert of bursty-loss on s0r0a:agg0-0: what each would run."""
    f = faults.parse({"kind": "bursty-loss", "node": "s0r0a", "iface": "agg0-0", **params}, "f", cfgs)
    inj = _Inj(cfgs)
    kind = faults.get("bursty-loss")
    kind.prepare(inj, f, "x1")
    kind.apply(inj, f)
    applied, inj.rt.calls = inj.rt.calls, []
    kind.revert(inj.rt, f.to_dict(), cfgs)
    return f, inj, applied, inj.rt.calls


def test_bursty_loss_netem_fallback_plan_unshaped(cfgs, monkeypatch):
    """Without nft dynset (a kernel before 5.4), netem's gemodel on the sending ends' egress root, both
    directions with both: 1, and nothing in nftables; revert deletes the root (the kernel's default back).
    The kernel is pretended to be a stock one (netem, no dynset): this project's has dynset and no netem."""
    monkeypatch.setattr(bursty_loss.kernel, "has", lambda key: key == "netem")
    peer = cfgs["s0r0a"].iface("agg0-0")
    f, inj, applied, reverted = _bursty_plan(cfgs, p=2, r=25, both=1)
    assert f.undo["netem"] == [["s0r0a", "agg0-0", None], [peer.peer, peer.peer_iface, None]] and "wire" not in f.undo
    ge = ["loss", "gemodel", "2%", "25%", "100%", "0%"]  # p, r, 1-h (bad state's loss), 1-k (good state's)
    assert applied == [("s0r0a", ["tc", "qdisc", "replace", "dev", "agg0-0", "root", "handle", "1:", "netem", *ge]),
                       (peer.peer, ["tc", "qdisc", "replace", "dev", peer.peer_iface, "root", "handle", "1:", "netem", *ge])]
    assert inj.nfts == []
    assert reverted == [("s0r0a", ["tc", "qdisc", "del", "dev", "agg0-0", "root"]),
                        (peer.peer, ["tc", "qdisc", "del", "dev", peer.peer_iface, "root"])]


def test_bursty_loss_netem_fallback_plan_keeps_a_shaped_links_rate(monkeypatch):
    """On a shaped link netem goes under the link's tbf (as impair's delay does), and revert puts the
    spec's tbf back, not the kernel's default queue."""
    monkeypatch.setattr(bursty_loss.kernel, "has", lambda key: key == "netem")
    shaped = experiment.load(ROOT / "experiments" / "ring-order.yml").plans[0].cfgs  # every link 20 Mbit/s
    shape = shaped["s0r0a"].iface("agg0-0").shape
    tbf = ["tbf", "rate", f"{shape['rate_kbit']}kbit"]
    f, _inj, applied, reverted = _bursty_plan(shaped, p=1, r=30, bad_loss=80, good_loss=1)
    assert len(f.undo["netem"]) == 1  # one direction: the frames s0r0a sends
    (n1, a1), (n2, a2) = applied
    assert n1 == n2 == "s0r0a"
    assert a1[:8] == ["tc", "qdisc", "replace", "dev", "agg0-0", "root", "handle", "1:"] and a1[8:11] == tbf
    assert a2 == ["tc", "qdisc", "replace", "dev", "agg0-0", "parent", "1:1", "handle", "10:", "netem", "loss",
                  "gemodel", "1%", "30%", "80%", "1%"]
    (r1n, r1), (r2n, r2) = reverted
    assert r1 == ["tc", "qdisc", "del", "dev", "agg0-0", "root"]
    assert r2[:6] == ["tc", "qdisc", "replace", "dev", "agg0-0", "root"] and r2[6:9] == tbf

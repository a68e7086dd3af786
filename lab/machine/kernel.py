"""What this machine's kernel offers a lab, checked before anything is created.

Every kernel feature a lab may use is probed here: sysctls by their /proc/sys file, qdiscs, the
nftables netdev egress hook and the nftables ip6 family by creating them in a throw-away network namespace
(``unshare -n``: it vanishes with the probe's process, so nothing is left behind), bonding by its module. ``assess`` then
says, for one spec, what the lab will do without each missing feature:

- refuse (one line, exit 2), where the lab would no longer be the fabric the spec describes;
- degrade with a note (printed by ``up``, kept in the lab's state and in every experiment's
  results.json), where the lab still means what it says.

The hash seed, and why a missing one degrades instead of refusing: ``net.ipv4.fib_multipath_hash_seed``
exists from Linux 6.11 (commit 4ee2a8c). Before it, every namespace's multipath hash is keyed by ONE
random key of the kernel's, drawn at boot and shared by all namespaces. So with ``hash.seed: shared``
(or one number for every switch) the switches still all hash alike, which is what that spec means (the
polarising case): failover figures are unaffected; only WHICH path a given 5-tuple takes changes from
boot to boot, so path maps and per-link byte shares are not reproducible across machines, and the hosts
hash with the switches' key. ``hash.seed: per-switch`` asks for decorrelated switches, which such a
kernel cannot give: refused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from hpnlab.machine import neightable
from hpnlab.model import netdefaults
from hpnlab.errors import HpnlabError
from hpnlab.node.plan import OPTIONAL_SYSCTLS
from hpnlab.model.spec import SPRAY_MODES

PROC_SYS = Path("/proc/sys")


class KernelError(HpnlabError):
    """The kernel lacks a feature the spec cannot do without; the message names it and the fix."""

    exit_code = 2


@dataclass(frozen=True)
class Feature:
    key: str
    what: str
    since: str  # the first mainline kernel that has it
    used_for: str
    without: str  # what a lab gets on a kernel without it


FEATURES: dict[str, Feature] = {f.key: f for f in (
    Feature("hash-seed", "sysctl net.ipv4.fib_multipath_hash_seed", "6.11",
            "spec hash.seed: the switches' ECMP hash key, per namespace",
            "every namespace hashes with one random key per boot: hash.seed shared/number runs (which path a "
            "flow takes is not reproducible across boots), per-switch is refused"),
    Feature("hash-fields", "sysctl net.ipv4.fib_multipath_hash_fields (hash policy 3)", "5.14",
            "spec hash.policy: the switches hash the 5-tuple (l4) or the addresses (l3)",
            "refused: the switches would hash a TCP flow by its sender's random socket hash"),
    Feature("nft-egress", "nftables netdev egress hook", "5.16",
            "mechanisms.arp_duplication: every host ARP leaves both ports; faults one-way and lacp-drop",
            "refused while mechanisms.arp_duplication is on (one ToR of each set would never learn its hosts)"),
    Feature("nft-ip6", "nftables ip6 family (input and output hooks)", "3.13",
            "a ToR's Router Advertisements held while a lab of namespaces starts, so each BGP session opens once",
            "nothing is held: the lab comes up, some BGP sessions about a second later (FRR 8.4's start timer)"),
    Feature("nft-dynset", "nftables set element delete from the packet path", "5.4",
            "fault bursty-loss: the Gilbert-Elliott state, one set element per link end",
            "bursty-loss uses netem's gemodel where the kernel has netem, else it is refused"),
    Feature("tbf", "tc qdisc tbf", "2.6",
            "spec links: (link capacity and port buffers)",
            "refused for a spec with links:"),
    Feature("htb", "tc qdisc htb and bfifo", "2.6",
            "spec qos (scheduler htb): priority queues on the switches' ports",
            "refused for a spec with qos"),
    Feature("prio", "tc qdisc prio (module sch_prio)", "2.6",
            "spec qos.scheduler prio: strict-priority queues under a tbf",
            "refused for qos.scheduler prio; htb works where the kernel has it"),
    Feature("ets", "tc qdisc ets (module sch_ets)", "5.6",
            "spec qos.scheduler ets: strict-priority queues under a tbf",
            "refused for qos.scheduler ets; htb works where the kernel has it"),
    Feature("netem", "tc qdisc netem (module sch_netem)", "2.6",
            "hpnlab impair ... delay=",
            "impair delay= is refused; rate, queue and loss still work"),
    Feature("rto-min", "sysctl net.ipv4.tcp_rto_min_us", "6.11",
            "spec tcp_rto_min_ms: the hosts' TCP minimum retransmission timeout, per namespace",
            "refused for a spec with tcp_rto_min_ms"),
    Feature("nft-spray", "nftables numgen and fwmark policy routing (ip rule fwmark)", "4.9",
            "multipath.mode spray: each packet's next hop chosen by a numgen mark and a routing table per next hop",
            "refused for multipath.mode spray"),
    Feature("tcp-reordering", "sysctl net.ipv4.tcp_reordering, per namespace", "4.6",
            "spec tcp_reordering: the hosts' TCP reorder tolerance",
            "refused for a spec with tcp_reordering"),
    Feature("bonding", "bonding driver, 802.3ad (module bonding)", "2.6",
            "host_driver auto/bond: the hosts' kernel LACP bond",
            "host_driver auto uses the userspace LACP host agent; bond is refused"),
)}


def has_sysctl(key: str, proc_sys: Path = PROC_SYS) -> bool:
    return (proc_sys / key.replace(".", "/")).exists()


def _in_scratch_netns(argv: list[str], stdin: str | None = None) -> bool:
    """Run argv in a new, anonymous network namespace (gone when it exits); True if it succeeded."""
    if not shutil.which("unshare") or not shutil.which(argv[0]):
        return False
    try:
        r = subprocess.run(["unshare", "-n", *argv], input=stdin, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def _qdisc(kind: str, *args: str) -> bool:
    return _in_scratch_netns(["tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", kind, *args])


def _nft_egress() -> bool:
    return _in_scratch_netns(["nft", "-f", "-"], "table netdev hpnlab_probe {\n  chain c {\n"
                             '    type filter hook egress device "lo" priority 0; policy accept;\n  }\n}\n')


def _nft_ip6() -> bool:
    return _in_scratch_netns(["nft", "-f", "-"], "table ip6 hpnlab_probe {\n  chain c {\n"
                             "    type filter hook output priority 0; policy accept;\n  }\n}\n")


def _nft_spray() -> bool:
    """A numgen mark as multipath.mode spray sets it, and a fwmark rule, in a scratch namespace."""
    rules = ("table ip hpnlab_probe {\n  chain c {\n    type filter hook prerouting priority mangle; policy accept;\n"
             "    meta mark set numgen inc mod 2 map { 0 : 0x101, 1 : 0x102 }\n  }\n}\n")
    return _in_scratch_netns(["sh", "-c", 'nft -f - && ip rule add fwmark 0x101 lookup 101'], rules)


def _nft_dynset() -> bool:
    # what bursty-loss loads (hpnlab.traffic.faults.gray.bursty_loss): a dynamic set added to and deleted from
    return _in_scratch_netns(["nft", "-f", "-"], "table netdev hpnlab_probe {\n"
                             "  set s {\n    type iface_index; flags dynamic; size 65535;\n  }\n  chain c {\n"
                             '    type filter hook ingress device "lo" priority 0; policy accept;\n'
                             "    meta iif @s delete @s { meta iif }\n    add @s { meta iif }\n  }\n}\n")


def _bonding() -> bool:
    from hpnlab.node.plan import bonding_available

    return bonding_available()


PROBES = {
    "hash-seed": lambda: has_sysctl("net.ipv4.fib_multipath_hash_seed"),
    "hash-fields": lambda: has_sysctl("net.ipv4.fib_multipath_hash_fields"),
    "nft-egress": _nft_egress,
    "nft-ip6": _nft_ip6,
    "nft-dynset": _nft_dynset,
    "tbf": lambda: _qdisc("tbf", "rate", "1mbit", "burst", "4000", "limit", "10000"),
    "htb": lambda: _in_scratch_netns(["sh", "-c", "tc qdisc add dev lo root handle 1: htb default 10 && "
                                      "tc class add dev lo parent 1: classid 1:10 htb rate 1mbit && "
                                      "tc qdisc add dev lo parent 1:10 handle 10: bfifo limit 10000"]),
    # prio with fewer than 3 bands needs its own priomap: tc sends the default one (1 2 2 2 1 2 0 0 1 ...),
    # which names band 2, and tc refuses a priomap naming a band the qdisc lacks, also where the kernel has
    # sch_prio; the qos node plan always writes a priomap
    "prio": lambda: _qdisc("prio", "bands", "2", "priomap", *["0"] * 16),
    "ets": lambda: _qdisc("ets", "bands", "2", "strict", "2"),
    "netem": lambda: _qdisc("netem", "delay", "0ms"),
    "bonding": _bonding,
    "rto-min": lambda: has_sysctl("net.ipv4.tcp_rto_min_us"),
    "nft-spray": _nft_spray,
    "tcp-reordering": lambda: has_sysctl("net.ipv4.tcp_reordering"),
}


@cache
def probe(key: str) -> bool:
    """Whether this machine's kernel has the feature (probed once per process)."""
    return bool(PROBES[key]())


def release() -> str:
    return os.uname().release


def pretended_missing() -> set[str]:
    """HPNLAB_KERNEL_LACKS=hash-seed,netem: treat these as missing, to see (and test) on a newer kernel
    what a lab does on an older one. Unknown names are one line, naming the variable."""
    names = {n.strip() for n in os.environ.get("HPNLAB_KERNEL_LACKS", "").split(",") if n.strip()}
    bad = sorted(names - set(FEATURES))
    if bad:
        raise KernelError(f"HPNLAB_KERNEL_LACKS: unknown feature '{bad[0]}'; choose from {', '.join(FEATURES)}")
    return names


def has(key: str) -> bool:
    """Whether a lab may use the feature here: the kernel has it and HPNLAB_KERNEL_LACKS does not name it.
    Every decision that depends on the kernel (the assessment, the host driver, impair's delay) asks this."""
    return key not in pretended_missing() and probe(key)


def probe_all() -> dict[str, bool]:
    """Every feature: ``has`` for each."""
    return {k: has(k) for k in FEATURES}


@dataclass
class Assessment:
    release: str
    lacks: list[str] = field(default_factory=list)  # feature keys the kernel lacks
    skip_sysctls: list[str] = field(default_factory=list)  # plan sysctls left out on this kernel
    notes: list[str] = field(default_factory=list)  # degradations the lab runs with, one short line each (up)
    details: list[str] = field(default_factory=list)  # the same notes in full, one each (hpnlab doctor)
    refusal: str | None = None  # why the lab cannot run on this kernel (first reason)

    def note(self, short: str, full: str) -> None:
        self.notes.append(short)
        self.details.append(full)


def assess(spec, have: dict[str, bool] | None = None, rel: str | None = None,
           shared: dict[str, str] | None = None, held: dict[str, int] | None = None) -> Assessment:
    """What a lab of ``spec`` gets on this kernel (or on one described by ``have``, for tests), and on this
    machine's shared network sysctls (or ``shared``; a described kernel reads none); ``held``: the shared
    values running labs set (default: read from their record)."""
    if shared is None:
        shared = netdefaults.read_shared() if have is None else {}
    if held is None:
        held = lab_held() if have is None else {}
    have = have if have is not None else probe_all()
    out = Assessment(release=rel or release(), lacks=sorted(k for k, ok in have.items() if not ok),
                     skip_sysctls=[k for k, feature in OPTIONAL_SYSCTLS.items() if not have.get(feature, True)])

    def refuse(msg: str) -> None:
        out.refusal = out.refusal or msg

    on = f"kernel {out.release}"
    if not have.get("hash-seed", True):
        if spec.hash.seed == "per-switch":
            refuse(f"spec field 'hash.seed': per-switch needs net.ipv4.fib_multipath_hash_seed (Linux 6.11+), "
                   f"which {on} lacks (all namespaces share one hash key); use hash.seed: shared or a newer kernel")
        else:
            out.note(f"{on} has no fib_multipath_hash_seed (6.11+): path maps are not reproducible (failover "
                     f"figures are unaffected)",
                     f"{on} has no net.ipv4.fib_multipath_hash_seed (6.11+): every switch and host "
                     f"hashes with the kernel's one random key, so switches hash alike as the spec says "
                     f"but which path a flow takes differs from boot to boot (path maps and link shares "
                     f"are not reproducible; failover figures are unaffected)")
    if not have.get("hash-fields", True):
        refuse(f"{on} has no net.ipv4.fib_multipath_hash_fields (Linux 5.14+): switches cannot hash the 5-tuple "
               f"(spec 'hash.policy'); use a 5.14+ kernel (Debian 12: 6.1)")
    if not have.get("nft-egress", True) and spec.mechanisms.arp_duplication:
        refuse(f"spec field 'mechanisms.arp_duplication' needs the nftables netdev egress hook (Linux 5.16+), "
               f"which {on} lacks; use a newer kernel, or set it false (one ToR of each set then never "
               f"learns its hosts)")
    if not have.get("nft-ip6", True):
        out.note(f"{on} has no nftables ip6 family: ToRs' Router Advertisements are not held at start, some BGP "
                 f"sessions come up ~1 s later (the fabric is the same)",
                 f"{on} has no nftables ip6 family: a lab of namespaces does not hold its ToRs' Router "
                 f"Advertisements while it starts, so some BGP sessions come up about a second later "
                 f"(FRR 8.4's start timer); the fabric is the same")
    if not have.get("tbf", True) and any((spec.links.access, spec.links.uplink, spec.links.core)):
        refuse(f"spec field 'links' needs the tbf qdisc (sch_tbf), which {on} lacks; load it or remove 'links'")
    if spec.qos is not None and not have.get(spec.qos.scheduler, True):
        other = "remove 'qos'" if spec.qos.scheduler == "htb" else "use scheduler htb"
        refuse(f"spec field 'qos.scheduler': '{spec.qos.scheduler}' needs the {spec.qos.scheduler} qdisc "
               f"(sch_{spec.qos.scheduler}), which {on} lacks; load it or {other}")
    if not have.get("rto-min", True) and spec.tcp_rto_min_ms is not None:
        refuse(f"spec field 'tcp_rto_min_ms' needs net.ipv4.tcp_rto_min_us (Linux 6.11+), which {on} lacks; "
               f"use a newer kernel or remove it")
    mode = spec.multipath.mode
    if not have.get("nft-spray", True) and mode in SPRAY_MODES:
        refuse(f"spec field 'multipath.mode': '{mode}' needs nftables numgen and fwmark policy routing, which {on} "
               f"lacks (or nft/ip cannot use them); use mode ecmp or a kernel with nf_tables and CONFIG_IP_MULTIPLE_TABLES")
    if not have.get("tcp-reordering", True) and spec.tcp_reordering is not None:
        refuse(f"spec field 'tcp_reordering' needs net.ipv4.tcp_reordering per namespace (Linux 4.6+), which {on} "
               f"lacks; use a newer kernel or remove it")
    if not have.get("bonding", True) and spec.host_driver == "bond":
        refuse(f"spec field 'host_driver': 'bond' needs kernel bonding, which {on} lacks; use 'auto' or "
               f"'userspace' (the userspace LACP host agent)")
    for short, full in netdefaults.drift(shared, held):
        out.note(short, full)
    return out


def lab_held() -> dict[str, int]:
    """The machine-wide sysctls running labs raised, as they set them (their record; empty when none)."""
    return neightable.held(neightable.RECORD)


CONGESTION_AVAILABLE = "net/ipv4/tcp_available_congestion_control"
MODULES = Path("/lib/modules")


def congestion_controls(proc_sys: Path = PROC_SYS, modules: Path = MODULES, rel: str | None = None) \
        -> tuple[list[str], list[str]]:
    """(TCP congestion controls the kernel has now, those it can load: a tcp_<name> module of this
    release). A socket asking for a loadable one loads it (CAP_NET_ADMIN, which the node programs have)."""
    try:
        have = (proc_sys / CONGESTION_AVAILABLE).read_text().split()
    except OSError:
        have = []
    mods = (modules / (rel or release()) / "kernel" / "net" / "ipv4").glob("tcp_*.ko*")
    loadable = sorted({m.name.split(".", 1)[0].removeprefix("tcp_") for m in mods} - {"diag"} - set(have))
    return have, loadable


def congestion_refusal(name: str, have: list[str], loadable: list[str], rel: str | None = None) -> str | None:
    """Why workload.congestion ``name`` cannot run on this kernel (one line: the field and the fix), or None.
    A kernel that lists nothing (no /proc) is not judged: the node programs refuse it themselves."""
    if not have or name in have or name in loadable:
        return None
    can = ", ".join(have) + (f"; loadable: {', '.join(loadable)}" if loadable else "")
    return (f"experiment field 'workload.congestion': kernel {rel or release()} has no TCP congestion control "
            f"'{name}' (it has {can}); choose one of those (cubic is Debian's and Ubuntu's default), or use a "
            f"kernel built with it (CONFIG_TCP_CONG_{name.upper()})")


def report(have: dict[str, bool] | None = None) -> list[dict]:
    """``hpnlab doctor``: every feature, whether this kernel has it, and what a lab gets without it."""
    have = have if have is not None else probe_all()
    return [{"feature": f.key, "what": f.what, "ok": have[f.key], "since": f.since, "used_for": f.used_for,
             "without": f.without} for f in FEATURES.values()]

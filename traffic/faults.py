"""Faults, applied only through the runtime's node namespaces (so they work on every runtime) and
always reverted: at the end of a run, on Ctrl-C or error, or by ``hpnlab fail --clear``.

Each applied fault is recorded in the lab's state.json before it takes effect, with what is needed to
undo it (nft table name, stopped PIDs), so a crashed controller can still be cleaned up.
"""

from __future__ import annotations

import math
import os
import signal
import threading
from dataclasses import dataclass, field

from hpnlab.errors import SpecError
from hpnlab.models import FaultRecord
from hpnlab.proc import cmdline, run
from hpnlab.runtime.base import Runtime

KINDS = {
    "link-down": "set an interface down (the peer loses carrier); revert: up",
    "link-flap": "down/up every period/2 seconds, count times",
    "one-way": "drop every frame one direction of a link (egress of node:iface), the link stays up",
    "lacp-drop": "drop only LACPDUs on a link, both directions",
    "hang": "stop every process in the node (SIGSTOP: FRR, agent) and drop all its ingress; links stay up",
    "power-off": "every interface of the node down: all its peers lose carrier",
    "bgp-shutdown": "administratively shut the BGP session on node:iface (neighbor IFACE shutdown)",
    "arp-flush": "age out a ToR's ARP entries on its host ports at once; relearned only from the hosts' next ARPs",
    "dataplane-dead": "a router forwards nothing (nftables forward drop) and its peer link is dead, while all it "
                      "sends and receives itself (BGP, BFD, LACP, micro-BFD, heartbeats) flows: no control-plane "
                      "timer sees it (paper §4.1)",
    "peer-link-down": "the direct link of a stacked ToR pair goes down (stacked-dual-tor only)",
}
INSTANT = {"arp-flush"}  # nothing to revert
LINK_KINDS = {"link-down", "link-flap", "one-way", "lacp-drop", "bgp-shutdown"}
TABLE_PREFIX = "hpnlab_fault"


@dataclass
class Fault:
    kind: str
    node: str
    iface: str | None = None  # several, comma-separated: one cable carrying both ports (single-ToR)
    at: float = 0.0  # seconds into the run
    until: float | None = None  # seconds into the run when it is reverted (None: end of run)
    period: float = 1.0  # link-flap
    count: int = 3  # link-flap
    undo: dict = field(default_factory=dict)

    @property
    def ifaces(self) -> list[str]:
        return self.iface.split(",") if self.iface else []

    @property
    def label(self) -> str:
        return f"{self.kind} {self.node}" + (f":{self.iface}" if self.iface else "")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "node": self.node, "iface": self.iface, "at": self.at, "until": self.until,
                "period": self.period, "count": self.count, "undo": self.undo}


def parse(d: dict, where: str, cfgs: dict[str, dict] | None = None) -> Fault:
    """One fault from YAML/CLI; errors name the field and the fix."""
    if not isinstance(d, dict):
        raise SpecError(f"{where}: must be a mapping like {{kind: link-down, node: s0h0, iface: r0p0, at: 2}}")
    known = {"kind", "node", "iface", "at", "until", "period", "count"}
    extra = set(d) - known
    if extra:
        raise SpecError(f"{where}.{sorted(extra)[0]}: unknown field; use {', '.join(sorted(known))}")
    kind = d.get("kind")
    if kind not in KINDS:
        raise SpecError(f"{where}.kind: '{kind}' is not a fault; choose one of {', '.join(KINDS)}")
    node = d.get("node")
    if not isinstance(node, str):
        raise SpecError(f"{where}.node: give the node name, e.g. s0h0 or s0r0a")
    iface = d.get("iface")
    if isinstance(iface, list):
        iface = ",".join(map(str, iface))
    try:
        f = Fault(kind, node, iface, float(d.get("at", 0)),
                  None if d.get("until") is None else float(d["until"]), float(d.get("period", 1.0)),
                  int(d.get("count", 3)))
    except (TypeError, ValueError):
        raise SpecError(f"{where}: at/until/period must be numbers (seconds) and count an integer") from None
    if f.kind in LINK_KINDS and not f.iface:
        raise SpecError(f"{where}.iface: '{kind}' needs the interface, e.g. iface: r0p0")
    if f.until is not None and f.until <= f.at:
        raise SpecError(f"{where}.until: must be later than at ({f.at:g})")
    if not all(math.isfinite(x) for x in (f.at, f.period, f.until or 0.0)):
        raise SpecError(f"{where}: at/until/period must be finite numbers of seconds")
    if f.at < 0 or f.period <= 0 or f.count < 1:
        raise SpecError(f"{where}: at must be >= 0, period > 0 and count >= 1")
    if cfgs is not None:
        if node not in cfgs:
            raise SpecError(f"{where}.node: '{node}' is not in the lab; nodes: {', '.join(sorted(cfgs))}")
        ifaces = [i["name"] for i in cfgs[node]["interfaces"]]
        for ifc in f.ifaces:
            if ifc not in ifaces:
                raise SpecError(f"{where}.iface: '{ifc}' is not an interface of {node}; it has {', '.join(ifaces)}")
        if kind == "arp-flush" and cfgs[node]["role"] != "tor":
            raise SpecError(f"{where}.node: arp-flush ages a ToR's ARP table; {node} is a {cfgs[node]['role']}")
        if kind == "peer-link-down":
            if "peer" not in ifaces:
                raise SpecError(f"{where}.node: {node} has no peer link; peer-link-down needs a ToR of access "
                                f"'stacked-dual-tor'")
            f.iface = "peer"
        if kind == "dataplane-dead" and cfgs[node]["role"] == "host":
            raise SpecError(f"{where}.node: {node} is a host; dataplane-dead stops a router's forwarding")
        if kind == "bgp-shutdown" and cfgs[node]["role"] == "host":
            raise SpecError(f"{where}.node: {node} is a host and runs no BGP; pick a ToR, agg or core")
    return f


def _nft_table(fault_id: str) -> str:
    return f"{TABLE_PREFIX}_{fault_id}"


def _nft_rules(table: str, chains: list[tuple[str, str, str]]) -> str:
    """chains: (iface, hook, match) -> a netdev table dropping what matches."""
    lines = [f"table netdev {table} {{"]
    for i, (ifc, hook, match) in enumerate(chains):
        lines += [f"  chain c{i} {{", f"    type filter hook {hook} device \"{ifc}\" priority -500; policy accept;",
                  f"    {match} drop", "  }"]
    lines.append("}")
    return "\n".join(lines) + "\n"


def node_pids(rt: Runtime, node: str) -> list[int]:
    return [p for p in rt.netns_pids(node) if p != os.getpid()]


class Injector:
    """Applies faults to one lab and remembers how to undo each; ``revert_all`` is idempotent."""

    def __init__(self, rt: Runtime, cfgs: dict[str, dict]):
        self.rt = rt
        self.cfgs = cfgs
        self.active: list[Fault] = []
        self._threads: dict[int, tuple[threading.Thread, threading.Event]] = {}  # id(fault) -> flapper
        self._n = 0
        self.exclude: set[int] = set()  # our own measurement processes (route monitors) keep running

    # --- bookkeeping in state.json ---------------------------------------------------------------------
    def _record(self) -> None:
        self.rt.state.data.faults = [FaultRecord(**f.to_dict()) for f in self.active]
        self.rt.state.save()

    def _ifaces(self, node: str) -> list[str]:
        return [i["name"] for i in self.cfgs[node]["interfaces"]]

    def _link(self, node: str, iface: str, state: str) -> None:
        self.rt.run(node, ["ip", "link", "set", iface, state], what=f"{node}: {iface} {state}")

    # --- apply / revert ----------------------------------------------------------------------------------
    def apply(self, f: Fault) -> None:
        self._n += 1
        fid = f"{os.getpid()}_{self._n}"
        self.active.append(f)
        if f.kind in ("one-way", "lacp-drop", "hang", "dataplane-dead"):
            f.undo["nft"] = _nft_table(fid)
        if f.kind == "dataplane-dead":
            f.undo["nft_inet"] = _nft_table(fid)
        if f.kind == "hang":
            f.undo["stopped"] = [p for p in node_pids(self.rt, f.node) if p not in self.exclude]
        self._record()  # before it takes effect: a crash here still leaves the undo recipe
        if f.kind == "link-down":
            for ifc in f.ifaces:
                self._link(f.node, ifc, "down")
        elif f.kind == "power-off":
            for ifc in self._ifaces(f.node):
                self._link(f.node, ifc, "down")
        elif f.kind == "link-flap":
            stop = threading.Event()
            t = threading.Thread(target=self._flap, args=(f, stop), daemon=True)
            self._threads[id(f)] = (t, stop)
            t.start()
        elif f.kind == "one-way":
            rules = [(ifc, "egress", "") for ifc in f.ifaces]
            self.rt.run(f.node, ["nft", "-f", "-"], input=_nft_rules(f.undo["nft"], rules), what=f"{f.node}: one-way drop")
        elif f.kind == "lacp-drop":
            rules = [(ifc, h, "ether type 0x8809") for ifc in f.ifaces for h in ("ingress", "egress")]
            self.rt.run(f.node, ["nft", "-f", "-"], input=_nft_rules(f.undo["nft"], rules), what=f"{f.node}: LACP drop")
        elif f.kind == "hang":
            for pid in f.undo["stopped"]:
                _signal(pid, signal.SIGSTOP)
            rules = [(ifc, "ingress", "") for ifc in self._ifaces(f.node)]
            self.rt.run(f.node, ["nft", "-f", "-"], input=_nft_rules(f.undo["nft"], rules), what=f"{f.node}: hang")
        elif f.kind == "peer-link-down":
            self._link(f.node, "peer", "down")
        elif f.kind == "dataplane-dead":
            # transit dropped; the ToR's own packets (local in/out) are not in the forward hook
            rules = (f"table inet {f.undo['nft_inet']} {{\n  chain transit {{\n"
                     f"    type filter hook forward priority -500; policy drop;\n  }}\n}}\n")
            if "peer" in self._ifaces(f.node):  # the peer link is a data-plane port: its sync dies with it
                rules += _nft_rules(f.undo["nft"], [("peer", h, "") for h in ("ingress", "egress")])
            self.rt.run(f.node, ["nft", "-f", "-"], input=rules, what=f"{f.node}: dataplane-dead")
        elif f.kind == "arp-flush":
            ports = [i["name"] for i in self.cfgs[f.node]["interfaces"] if i["kind"] == "access"]
            for ifc in ports:
                self.rt.run(f.node, ["ip", "neigh", "flush", "dev", ifc], what=f"{f.node}: neigh flush")
        elif f.kind == "bgp-shutdown":
            asn = self.cfgs[f.node]["asn"]
            run(self.rt.vtysh_argv(f.node, ["configure terminal", f"router bgp {asn}",
                                            *(f"neighbor {ifc} shutdown" for ifc in f.ifaces)]), what=f"{f.node}: vtysh")

    def _flap(self, f: Fault, stop: threading.Event) -> None:
        for _ in range(f.count):
            for ifc in f.ifaces:
                self._link(f.node, ifc, "down")
            if stop.wait(f.period / 2):
                break
            for ifc in f.ifaces:
                self._link(f.node, ifc, "up")
            if stop.wait(f.period / 2):
                break

    def revert(self, f: Fault) -> None:
        flapper = self._threads.pop(id(f), None)  # only this fault's thread: others keep flapping
        if flapper:
            flapper[1].set()
            flapper[0].join(timeout=5)
        revert_recorded(self.rt, f.to_dict(), self.cfgs)
        if f in self.active:
            self.active.remove(f)
        self._record()

    def revert_all(self) -> None:
        for f in list(reversed(self.active)):
            self.revert(f)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def revert_recorded(rt: Runtime, d: dict, cfgs: dict[str, dict]) -> None:
    """Undo one recorded fault; safe to repeat (used after a crash too)."""
    node, iface, kind, undo = d["node"], d.get("iface"), d["kind"], d.get("undo", {})
    ifaces = iface.split(",") if iface else []
    if kind in ("link-down", "link-flap", "peer-link-down"):
        for ifc in ifaces:
            rt.run(node, ["ip", "link", "set", ifc, "up"], check=False)
    elif kind == "power-off":
        for i in cfgs[node]["interfaces"]:
            rt.run(node, ["ip", "link", "set", i["name"], "up"], check=False)
    elif kind == "bgp-shutdown":
        run(rt.vtysh_argv(node, ["configure terminal", f"router bgp {cfgs[node]['asn']}",
                                 *(f"no neighbor {ifc} shutdown" for ifc in ifaces)]), check=False)
    if undo.get("nft"):
        rt.run(node, ["nft", "delete", "table", "netdev", undo["nft"]], check=False)
    if undo.get("nft_inet"):
        rt.run(node, ["nft", "delete", "table", "inet", undo["nft_inet"]], check=False)
    for pid in undo.get("stopped", []):
        if cmdline(pid):  # still there: let it run again
            _signal(pid, signal.SIGCONT)


def revert_state(rt: Runtime, cfgs: dict[str, dict]) -> int:
    """Undo every fault recorded in state.json (``hpnlab fail --clear``, or after a crashed run)."""
    recorded = [f.model_dump() for f in rt.state.data.faults]
    for d in reversed(recorded):
        revert_recorded(rt, d, cfgs)
    rt.state.data.faults = []
    rt.state.save()
    return len(recorded)


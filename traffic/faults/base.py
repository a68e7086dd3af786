"""What every fault kind shares: the parsed fault, the registry of kinds, the injector that applies and
reverts them, and the undo of a recorded fault (also after a crash). Each kind is one class in a file
of its own in this package, registered with ``@register``: a new fault kind is one file.

Faults act only through the runtime's node namespaces (so they work on every runtime) and are always
reverted: at the end of a run, on Ctrl-C or error, or by ``hpnlab fail --clear``. Each applied fault is
recorded in the lab's state.json before it takes effect, with what is needed to undo it (nft table
names, stopped PIDs), so a crashed controller can still be cleaned up.
"""

from __future__ import annotations

import itertools
import math
import os
import signal
import threading
from dataclasses import dataclass, field

from hpnlab.errors import SpecError
from hpnlab.model.models import FaultRecord, LabState, NodeConfig
from hpnlab.machine.proc import cmdline
from hpnlab.runtime.base import Runtime

TABLE_PREFIX = "hpnlab_fault"
_SEQ = itertools.count(1)  # fault ids of this process


class FaultKind:
    """One kind of fault. A subclass sets ``kind`` and ``help``, and overrides what differs: ``check``
    (what the kind needs of its node, beyond the common checks), ``prepare`` (the undo recipe, recorded
    before the fault acts), ``apply``, and ``revert`` (what the recorded undo recipe does not already
    cover: nftables tables and stopped processes are undone for every kind)."""

    kind = ""
    help = ""
    needs_iface = False  # a link fault: names the interface(s)
    uses_nft = False  # drops with an nftables netdev table: its name is in the undo recipe as "nft"
    params: dict[str, float] = {}  # the kind's own parameters and their defaults (experiment files, Lab.fault)
    freezes_node = False  # stops the node's own processes: its agent's late timers are the fault, not the machine

    def check_params(self, f: "Fault", where: str) -> None:
        """Refuse, in one line naming the field, parameter values the kind cannot use."""

    def check(self, f: "Fault", where: str, cfgs: dict[str, NodeConfig]) -> None:
        pass

    def prepare(self, inj: "Injector", f: "Fault", fid: str) -> None:
        pass

    def apply(self, inj: "Injector", f: "Fault") -> None:
        raise NotImplementedError

    def duration(self, f: "Fault") -> float | None:
        """How long the fault acts by itself (a flap's count x period); None: until reverted."""
        return None

    def revert(self, rt: Runtime, d: dict, cfgs: dict[str, NodeConfig]) -> None:
        pass


REGISTRY: dict[str, FaultKind] = {}


def register(cls: type[FaultKind]) -> type[FaultKind]:
    REGISTRY[cls.kind] = cls()
    return cls


def get(kind: str) -> FaultKind:
    return REGISTRY[kind]


def names() -> list[str]:
    return list(REGISTRY)


def kinds() -> dict[str, str]:
    """kind -> what it does (``hpnlab fail --list``, the docs, ``Lab.faults``)."""
    return {k: v.help for k, v in REGISTRY.items()}


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
    params: dict = field(default_factory=dict)  # the kind's own (FaultKind.params), e.g. degrade's fraction

    @property
    def ifaces(self) -> list[str]:
        return self.iface.split(",") if self.iface else []

    @property
    def label(self) -> str:
        return f"{self.kind} {self.node}" + (f":{self.iface}" if self.iface else "") + \
            "".join(f" {k}={v:g}" for k, v in self.params.items())

    def to_dict(self) -> dict:
        return {"kind": self.kind, "node": self.node, "iface": self.iface, "at": self.at, "until": self.until,
                "period": self.period, "count": self.count, "undo": self.undo, "params": self.params}


def parse(d: dict, where: str, cfgs: dict[str, NodeConfig] | None = None) -> Fault:
    """One fault from YAML/CLI; errors name the field and the fix."""
    if not isinstance(d, dict):
        raise SpecError(f"{where}: must be a mapping like {{kind: link-down, node: s0h0, iface: r0p0, at: 2}}")
    kind = d.get("kind")
    if kind not in REGISTRY:
        raise SpecError(f"{where}.kind: '{kind}' is not a fault; choose one of {', '.join(REGISTRY)}")
    own = REGISTRY[kind].params
    known = {"kind", "node", "iface", "at", "until", "period", "count"} | set(own)
    extra = set(d) - known
    if extra:
        raise SpecError(f"{where}.{sorted(extra)[0]}: unknown field for {kind}; use {', '.join(sorted(known))}")
    params = {}
    for k, default in own.items():
        v = d.get(k, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise SpecError(f"{where}.{k}: give a number (default {default:g})")
        params[k] = float(v)
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
    if REGISTRY[kind].needs_iface and not f.iface:
        raise SpecError(f"{where}.iface: '{kind}' needs the interface, e.g. iface: r0p0")
    if f.until is not None and f.until <= f.at:
        raise SpecError(f"{where}.until: must be later than at ({f.at:g})")
    if not all(math.isfinite(x) for x in (f.at, f.period, f.until or 0.0)):
        raise SpecError(f"{where}: at/until/period must be finite numbers of seconds")
    if f.at < 0 or f.period <= 0 or f.count < 1:
        raise SpecError(f"{where}: at must be >= 0, period > 0 and count >= 1")
    f.params = params
    REGISTRY[kind].check_params(f, where)
    if cfgs is not None:
        if node not in cfgs:
            raise SpecError(f"{where}.node: '{node}' is not in the lab; nodes: {', '.join(sorted(cfgs))}")
        ifaces = cfgs[node].iface_names
        for ifc in f.ifaces:
            if ifc not in ifaces:
                raise SpecError(f"{where}.iface: '{ifc}' is not an interface of {node}; it has {', '.join(ifaces)}")
        REGISTRY[kind].check(f, where, cfgs)
    return f


def nft_table(fault_id: str) -> str:
    return f"{TABLE_PREFIX}_{fault_id}"


def nft_rules(table: str, chains: list[tuple[str, str, str]]) -> str:
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

    def __init__(self, rt: Runtime, cfgs: dict[str, NodeConfig]):
        self.rt = rt
        self.cfgs = cfgs
        self.active: list[Fault] = []
        self._threads: dict[int, tuple[threading.Thread, threading.Event]] = {}  # id(fault) -> flapper
        self.exclude: set[int] = set()  # our own measurement processes (route monitors) keep running
        self._ids: set[str] = set()  # every fault id this injector applied (its records in state.json)

    # --- bookkeeping in state.json ---------------------------------------------------------------------
    def _record(self) -> None:
        """This injector's active faults into state.json, beside what other hpnlab processes recorded
        meanwhile: their faults (a fault left by an earlier `hpnlab fail` keeps its undo recipe for --clear)
        and everything else in the file (an `hpnlab impair` made while a `fail --for` held its fault: saving
        this process's copy of the whole state dropped it, and `impair --clear` then no longer found it)."""
        mine = {f.undo.get("id") for f in self.active} | self._ids
        data = self._on_disk() or self.rt.state.data
        others = [r for r in data.faults if r.undo.get("id") not in mine or r.undo.get("id") is None]
        data.faults = others + [FaultRecord(**f.to_dict()) for f in self.active]
        self.rt.state.data = data
        self.rt.state.save()

    def _on_disk(self) -> LabState | None:
        path = getattr(self.rt.state, "path", None)
        try:
            return LabState.model_validate_json(path.read_text()) if path else None
        except (OSError, ValueError):  # no file yet or a damaged one: this process's copy is all there is
            return None

    def ifaces(self, node: str) -> list[str]:
        return self.cfgs[node].iface_names

    def link(self, node: str, iface: str, state: str) -> None:
        self.rt.run(node, ["ip", "link", "set", iface, state], what=f"{node}: {iface} {state}")

    # --- apply / revert ----------------------------------------------------------------------------------
    def apply(self, f: Fault) -> None:
        kind = REGISTRY[f.kind]
        self.active.append(f)
        fid = f"{os.getpid()}_{next(_SEQ)}"  # unique across injectors and processes
        f.undo["id"] = fid
        self._ids.add(fid)
        if kind.uses_nft:
            f.undo["nft"] = nft_table(fid)
        kind.prepare(self, f, fid)
        self._record()  # before it takes effect: a crash here still leaves the undo recipe
        kind.apply(self, f)

    def nft(self, node: str, rules: str, what: str) -> None:
        self.rt.run(node, ["nft", "-f", "-"], input=rules, what=f"{node}: {what}")

    def start_thread(self, f: Fault, target) -> None:
        """A fault that keeps acting (link-flap): ``target(stop_event)`` on a thread, stopped by revert."""
        stop = threading.Event()
        t = threading.Thread(target=target, args=(stop,), daemon=True)
        self._threads[id(f)] = (t, stop)
        t.start()

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


def send_signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def revert_recorded(rt: Runtime, d: dict, cfgs: dict[str, NodeConfig]) -> None:
    """Undo one recorded fault; safe to repeat (used after a crash too)."""
    node, undo = d["node"], d.get("undo", {})
    if d["kind"] in REGISTRY:
        REGISTRY[d["kind"]].revert(rt, d, cfgs)
    if undo.get("nft"):
        rt.run(node, ["nft", "delete", "table", "netdev", undo["nft"]], check=False)
    if undo.get("nft_inet"):
        rt.run(node, ["nft", "delete", "table", "inet", undo["nft_inet"]], check=False)
    for pid in undo.get("stopped", []):
        if cmdline(pid):  # still there: let it run again
            send_signal(pid, signal.SIGCONT)


def revert_state(rt: Runtime, cfgs: dict[str, NodeConfig]) -> int:
    """Undo every fault recorded in state.json (``hpnlab fail --clear``, or after a crashed run)."""
    recorded = [f.model_dump() for f in rt.state.data.faults]
    for d in reversed(recorded):
        revert_recorded(rt, d, cfgs)
    rt.state.data.faults = []
    rt.state.save()
    return len(recorded)


"""The fabric's state, one snapshot a second, and what changed between two: the live view's model
(``hpnlab watch``). It reads what `hpnlab status` and verify read (hpnlab.lifecycle.nodestate, hpnlab.lifecycle.verify, the
agents' status files and the lab's state.json), so the page never disagrees with the CLI.

A link is ``down`` when either end has no carrier (both ends' carrier from one RTM_GETLINK dump per node a
second, through a netlink socket kept open in each node's namespace: no process per link); ``faulted`` when
a fault recorded in state.json acts on either end (one-way, silent loss...); ``impaired`` when ``hpnlab
impair`` (or ``Lab.impair``) changed either end; ``shaped`` when the spec gives it a rate; else ``up``.
Every fault applied by ``hpnlab fail``, an experiment or a user's ``Lab`` is in state.json, so each shows.

A router's bgpd and bfdd are asked (over their vty sockets: no process) only when something that moves
their sessions changed (Poller.to_ask), else every ``refresh`` seconds; the FRR daemons' PIDs are read
again only when one of them is gone, else every ``pids_every`` seconds."""

from __future__ import annotations

import json
import socket
import struct
import time
from dataclasses import dataclass, field

from hpnlab.lifecycle import nodestate, verify
from hpnlab.model.models import LabState, NodeConfig
from hpnlab.node import nsenter, rtnl
from hpnlab.generate.picture import link_id
from hpnlab.runtime.base import Runtime
from hpnlab.model.topology import Topology

LINK_STATES = ("up", "shaped", "impaired", "faulted", "down")  # worst last
NODE_FIELDS = ("frr", "bgp", "bfd", "agent", "lacp", "host_routes", "fault")  # what the event list follows


@dataclass
class LinkInfo:
    id: str
    ends: tuple[tuple[str, str], tuple[str, str]]
    kind: str
    shaped: bool


def links_of(topo: Topology, cfgs: dict[str, NodeConfig]) -> list[LinkInfo]:
    out = []
    for lk in topo.links:
        ends = ((lk.a.node, lk.a.iface), (lk.b.node, lk.b.iface))
        shaped = any((ifc := cfgs[n].iface(i)) is not None and bool(ifc.shape) for n, i in ends if n in cfgs)
        out.append(LinkInfo(link_id(lk), ends, lk.kind, shaped))
    return out


def fault_ends(faults: list[dict]) -> tuple[dict[tuple[str, str], list[str]], dict[str, list[str]]]:
    """Recorded faults (state.json's) -> (node, iface) -> labels of the faults on that link end, and
    node -> labels of the faults on the whole node (no interface: power-off, hang, bgp-shutdown...)."""
    ends: dict[tuple[str, str], list[str]] = {}
    nodes: dict[str, list[str]] = {}
    for f in faults:
        label = f"{f['kind']} {f['node']}" + (f":{f['iface']}" if f.get("iface") else "")
        ifaces = [i for i in (f.get("iface") or "").split(",") if i]
        for i in ifaces:
            ends.setdefault((f["node"], i), []).append(label)
        if not ifaces:
            nodes.setdefault(f["node"], []).append(label)
    return ends, nodes


def link_states(links: list[LinkInfo], carrier: dict[str, dict[str, bool]], faults: list[dict],
                impairments: dict[str, dict]) -> dict[str, dict]:
    """Pure: link id -> {"state", "detail"} from each end's carrier, the recorded faults and impairments."""
    on_end, _ = fault_ends(faults)
    out = {}
    for lk in links:
        down = [f"{n}:{i}" for n, i in lk.ends if carrier.get(n, {}).get(i) is False]
        unknown = [f"{n}:{i}" for n, i in lk.ends if carrier.get(n, {}).get(i) is None]
        flt = [lab for end in lk.ends for lab in on_end.get(end, [])]
        imp = [f"{n}:{i} " + ", ".join(f"{k}={v:g}" for k, v in impairments[f"{n}:{i}"].items())
               for n, i in lk.ends if f"{n}:{i}" in impairments]
        if down:
            state, detail = "down", "no carrier at " + ", ".join(down)
        elif unknown:
            state, detail = "down", "not found: " + ", ".join(unknown)
        elif flt:
            state, detail = "faulted", "; ".join(flt)
        elif imp:
            state, detail = "impaired", "; ".join(imp)
        elif lk.shaped:
            state, detail = "shaped", "rate set by the spec"
        else:
            state, detail = "up", "carrier at both ends"
        if (flt or imp) and state == "down":
            detail += " (" + "; ".join(flt + imp) + ")"
        out[lk.id] = {"state": state, "detail": detail}
    return out


def node_view(row: dict, bfd: tuple[int, int] | None, node_faults: list[str]) -> dict:
    """Pure: a nodestate row as the page shows it: words, counts, overall ``ok`` and the node's faults."""
    v = {k: row[k] for k in ("role", "frr", "bgp", "agent", "lacp", "host_routes", "late", "fare") if k in row}
    counts = dict(row.get("_counts", {}))
    if bfd is not None:
        v["bfd"] = f"{bfd[0]}/{bfd[1]} sessions up"
        counts["bfd"] = list(bfd)
    v["counts"] = counts
    if node_faults:
        v["fault"] = "; ".join(node_faults)
    v["ok"] = bool(row.get("ok")) and not node_faults and all(u == w for u, w in counts.values())
    return v


def _severity(old: dict | None, new: dict) -> str:
    return "good" if new.get("ok") and not (old or {}).get("ok", True) else \
        "bad" if not new.get("ok") or (old and old.get("ok") and not new.get("ok")) else "info"


def diff(prev: dict | None, cur: dict) -> list[dict]:
    """Pure: the events between two snapshots, each {"t", "kind", "what", "severity"} (severity: bad when
    something went down, good when it came back, info otherwise). The first snapshot has no events."""
    if prev is None:
        return []
    t = cur["t"]
    out: list[dict] = []
    if prev.get("running", True) != cur.get("running", True):
        out.append({"t": t, "kind": "lab", "what": "lab is " + ("running" if cur.get("running", True) else
                                                                "gone (taken down)"),
                    "severity": "good" if cur.get("running", True) else "bad"})
    for lid, ls in cur.get("links", {}).items():
        old = prev.get("links", {}).get(lid)
        if old is not None and old["state"] != ls["state"]:
            sev = "good" if ls["state"] in ("up", "shaped") else \
                "bad" if LINK_STATES.index(ls["state"]) > LINK_STATES.index(old["state"]) else "info"
            out.append({"t": t, "kind": "link", "id": lid, "severity": sev,
                        "what": f"link {lid}: {old['state']} -> {ls['state']} ({ls['detail']})"})
    for n, nv in cur.get("nodes", {}).items():
        old = prev.get("nodes", {}).get(n)
        if old is None:
            continue
        for k in NODE_FIELDS:
            if old.get(k) != nv.get(k):
                was, now = old.get(k, "-"), nv.get(k, "-")
                c_old, c_new = old.get("counts", {}).get(k), nv.get("counts", {}).get(k)
                sev = ("bad" if c_new[0] < c_old[0] else "good") if c_old and c_new and c_old[0] != c_new[0] \
                    else ("bad" if k == "fault" and now != "-" else "good" if k == "fault" else _severity(old, nv))
                out.append({"t": t, "kind": "node", "id": n, "severity": sev, "what": f"{n} {k}: {was} -> {now}"})
    pf, cf = set(prev.get("faults", [])), set(cur.get("faults", []))
    out += [{"t": t, "kind": "fault", "severity": "bad", "what": f"fault applied: {f}"} for f in sorted(cf - pf)]
    out += [{"t": t, "kind": "fault", "severity": "good", "what": f"fault reverted: {f}"} for f in sorted(pf - cf)]
    pi, ci = prev.get("impairments", {}), cur.get("impairments", {})
    for k in sorted(set(pi) | set(ci)):
        if pi.get(k) != ci.get(k):
            what = "cleared" if k not in ci else ", ".join(f"{a}={b:g}" for a, b in ci[k].items())
            out.append({"t": t, "kind": "impair", "severity": "good" if k not in ci else "bad",
                        "what": f"impairment {k}: {what}"})
    return out


def agent_events(rows: dict[str, dict], seen: dict[str, float]) -> list[dict]:
    """The agents' own timestamped events (carrier, LACP, host routes, nexthops) newer than ``seen`` (node
    -> the last one's time, updated). A node's first read only sets ``seen``: its history is not news."""
    out = []
    for n, row in rows.items():
        evs = row.get("_events") or []
        if not evs:
            continue
        last = seen.get(n)
        seen[n] = max(seen.get(n, 0.0), evs[-1][0])
        if last is None:
            continue
        for t, msg in evs:
            if t > last:
                out.append({"t": t, "kind": "agent", "id": n, "severity": "info", "what": f"{n}: {msg}"})
    return out


_LINK_DUMP = struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0)


@dataclass
class Poller:
    """Reads the running lab once per ``snapshot()`` call (the server calls it once a second)."""

    rt: Runtime
    cfgs: dict[str, NodeConfig]
    topo: Topology
    refresh: float = 5.0  # seconds between asks of a quiet router's bgpd and bfdd
    hot_for: float = 10.0  # after a change, its routers' daemons are asked every snapshot for this long
    pids_every: float = 10.0
    links: list[LinkInfo] = field(init=False)
    sockets: dict[str, socket.socket] = field(default_factory=dict)
    pids: dict[int, str] | None = None
    pids_at: float = 0.0
    bgp: dict[str, dict] = field(default_factory=dict)
    bfd: dict[str, tuple[int, int] | None] = field(default_factory=dict)
    asked_at: dict[str, float] = field(default_factory=dict)
    hot_until: dict[str, float] = field(default_factory=dict)
    asked: int = 0  # how many routers' daemons were asked (the bench reads it)
    agent_seen: dict[str, float] = field(default_factory=dict)
    last: dict | None = None
    last_inputs: dict = field(default_factory=dict)
    state_mtime: int | None = None

    def __post_init__(self) -> None:
        self.links = links_of(self.topo, self.cfgs)
        self.routers = [n for n, c in self.cfgs.items() if c.role != "host"]

    def close(self) -> None:
        for s in self.sockets.values():
            s.close()
        self.sockets.clear()

    def carrier(self, node: str) -> dict[str, bool]:
        """Every interface's carrier in the node: one netlink dump through a socket kept in its namespace
        (where the node is a namespace of this machine), else ``ip -j link`` in the node."""
        sock = self.sockets.get(node)
        try:
            if sock is None:
                path = self.rt.netns_path(node)
                if path is not None:
                    sock = self.sockets[node] = nsenter.netlink_socket(path)
            if sock is not None:
                return rtnl.link_states(rtnl.dump(rtnl.RTM_GETLINK, _LINK_DUMP, sock))
        except OSError:
            if self.sockets.pop(node, None) is not None:
                sock.close()
            return {}
        r = self.rt.run(node, ["ip", "-j", "link", "show"], check=False, timeout=5)
        try:
            return {lk["ifname"]: lk.get("operstate") == "UP" for lk in json.loads(r.stdout or "[]")}
        except (ValueError, KeyError, TypeError):
            return {}

    def daemons(self, now: float) -> dict[str, list[bool]]:
        if self.pids is None or now - self.pids_at > self.pids_every:
            self.pids, self.pids_at = self.rt.frr_pids(), now
        alive = nodestate.daemons_alive(self.rt, self.pids)
        if not all(all(a) for a in alive.values()):  # one gone: restarted ones have new PIDs
            self.pids, self.pids_at = self.rt.frr_pids(), now
            alive = nodestate.daemons_alive(self.rt, self.pids)
        return alive

    def touched(self, before: dict, now: dict) -> set[str]:
        """The nodes whose sessions a change of the recorded faults or impairments can move: each changed
        one's node and the peers across its interface (across every link of the node, for a fault on the
        whole node: power-off, hang, bgp-shutdown)."""
        def keyed(d: dict) -> dict[str, tuple[str, list[str]]]:
            out = {json.dumps(f, sort_keys=True): (f["node"], [i for i in (f.get("iface") or "").split(",") if i])
                   for f in d.get("faults", [])}
            out.update({f"impair {k} {json.dumps(v, sort_keys=True)}": (k.split(":", 1)[0], [k.split(":", 1)[1]])
                        for k, v in d.get("impairments", {}).items()})
            return out

        a, b = keyed(before), keyed(now)
        nodes: set[str] = set()
        for key in set(a) ^ set(b):
            node, ifaces = (a.get(key) or b[key])
            nodes.add(node)
            for (n1, i1), (n2, i2) in (lk.ends for lk in self.links):
                if n1 == node and (not ifaces or i1 in ifaces):
                    nodes.add(n2)
                elif n2 == node and (not ifaces or i2 in ifaces):
                    nodes.add(n1)
        return nodes

    def to_ask(self, now: float, carrier: dict, daemons: dict, data: dict) -> list[str]:
        """The routers whose bgpd and bfdd are asked now: those whose links or daemons changed or that a
        fault or an impairment that came or went touches (its effect on BGP and BFD comes later: they stay
        asked for ``hot_for`` s), those not all up at the last ask, and those not asked for ``refresh`` s.
        Not the kernel's TCP connections (verify.PollMemo's): an inet_diag dump walks every namespace's
        connection table, ~5 ms of kernel time per router on a machine running other labs."""
        prev = self.last_inputs
        lab = {"faults": data.get("faults", []), "impairments": data.get("impairments", {})}
        touched = self.touched(prev["lab"], lab) if "lab" in prev else set()
        for n in self.routers:
            ns = self.rt.netns(n)
            if n in touched or ("carrier" in prev and carrier.get(n) != prev["carrier"].get(n)) or \
                    ("daemons" in prev and daemons.get(ns) != prev["daemons"].get(ns)):
                self.hot_until[n] = now + self.hot_for
        self.last_inputs = {"lab": lab, "carrier": carrier, "daemons": daemons}
        out = []
        for n in self.routers:
            b, f = self.bgp.get(n), self.bfd.get(n, (0, 0))
            settled = b is not None and b["ok"] and (f is None or f[0] == f[1] or not self.cfgs[n].bfd)
            if now < self.hot_until.get(n, 0) or not settled or now - self.asked_at.get(n, 0) >= self.refresh:
                out.append(n)
        return out

    def ask(self, n: str, now: float) -> None:
        self.bgp[n] = verify.ask_bgp(self.rt, n, len(self.cfgs[n].fabric_ifaces), timeout=2.0)
        if self.cfgs[n].bfd:
            self.bfd[n] = nodestate.bfd_sessions(self.rt, n, timeout=2.0)
        self.asked_at[n] = now
        self.asked += 1

    def snapshot(self) -> dict:
        """The lab now: {"t", "running", "links", "nodes", "faults", "impairments"}, and ``events``: what
        changed since the last call (hpnlab.lifecycle.fabricstate.diff) and the agents' new events, oldest first."""
        now = time.time()
        try:
            mtime = self.rt.state.path.stat().st_mtime_ns
            data = json.loads(self.rt.state.path.read_text())
            if mtime != self.state_mtime:  # the lab's record changed (agents started, a fault): read it again
                self.rt.state.data = LabState.model_validate(data)
                self.state_mtime, self.pids = mtime, None
        except (OSError, ValueError):  # taken down: if it comes back, its namespaces and daemons are new
            self.close()
            self.bgp.clear()
            self.bfd.clear()
            self.pids = self.state_mtime = None
            snap = {"t": now, "running": False, "links": {}, "nodes": {}, "faults": [], "impairments": {}}
            events = diff(self.last, snap)
            self.last = snap
            return {**snap, "events": events}
        faults = data.get("faults", [])
        impairments = data.get("impairments", {})
        carrier = {n: self.carrier(n) for n in self.cfgs}
        daemons = self.daemons(now)
        asking = self.to_ask(now, carrier, daemons, data)
        if asking:  # in parallel: a hung bgpd costs its timeout once, not once per router
            verify.pmap(lambda n: self.ask(n, now), asking)
        rows = {n: nodestate.node_row(self.rt, n, c, daemons, None, None, self.bgp.get(n))
                for n, c in self.cfgs.items()}
        _, on_node = fault_ends(faults)
        snap = {"t": now, "running": True,
                "links": link_states(self.links, carrier, faults, impairments),
                "nodes": {n: node_view(rows[n], self.bfd.get(n), on_node.get(n, [])) for n in self.cfgs},
                "faults": sorted({f"{f['kind']} {f['node']}" + (f":{f['iface']}" if f.get("iface") else "")
                                  for f in faults}),
                "impairments": impairments}
        events = sorted(diff(self.last, snap) + agent_events(rows, self.agent_seen), key=lambda e: e["t"])
        self.last = snap
        return {**snap, "events": events}

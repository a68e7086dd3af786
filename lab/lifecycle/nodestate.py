"""One node's state as `hpnlab status` shows it and the live view (`hpnlab watch`) colours it: FRR daemons
running, BGP sessions, the agent's heartbeat, LACP members collecting/distributing, a ToR's host /32s, its
late timers and FARE's advertised bandwidths. One function for both, so the two never disagree."""

from __future__ import annotations

import time

from hpnlab.model import addresses
from hpnlab.generate import frr
from hpnlab.lifecycle import verify
from hpnlab.model.models import NodeConfig
from hpnlab.machine.proc import pid_alive
from hpnlab.runtime.base import Runtime


def daemons_alive(rt: Runtime, pids: dict[int, str] | None = None) -> dict[str, list[bool]]:
    """namespace -> whether each of its FRR daemons is running (``pids``: ``rt.frr_pids()``, read once
    by a caller that polls)."""
    out: dict[str, list[bool]] = {}
    for pid, ns in (rt.frr_pids() if pids is None else pids).items():
        out.setdefault(ns, []).append(pid_alive(pid))
    return out


def lacp_ports(cfg: NodeConfig, st: dict) -> list[dict]:
    """The LACP ports an agent's status lists: a ToR's host ports, a host's NICs' ports."""
    return st.get("ports", []) if cfg.role == "tor" else [p for nic in st.get("nics", []) for p in nic["ports"]]


def node_row(rt: Runtime, n: str, c: NodeConfig, daemons: dict[str, list[bool]], containers: dict | None,
             memo: verify.PollMemo | None = None, bgp: dict | None = None) -> dict:
    """One node's row: {"node", "role", "netns", "addresses", ["nics" | "subnet", "gateway"], ["container"], ["frr", "bgp"], ["agent"], ["lacp"],
    ["host_routes"], ["late"], ["fare"], "ok"} and, for the live view, the counts behind the words
    (``_counts``: frr, bgp and lacp as [up, want]) and the agent's events (``_events``). ``memo``: a poll loop's (verify.PollMemo), so
    bgpd is asked only when its sessions' TCP connections say something may have changed; ``bgp``: the
    router's check_bgp result, where the caller asked every router at once."""
    row: dict = {"node": n, "role": c.role, "netns": rt.netns(n), "addresses": addresses.cell(c)}
    if c.role == "host":
        row["nics"] = addresses.host_addresses(c)
    elif c.role == "tor" and c.subnet:
        row["subnet"], row["gateway"] = c.subnet, c.gateway
    counts: dict[str, list[int]] = {}
    oks = []
    if containers is not None:
        row["container"] = containers.get(n, {}).get("state", "missing")
        oks.append(row["container"] == "running")
    if c.role != "host":
        alive, want = daemons.get(rt.netns(n), []), len(frr.daemons(c.bfd))
        row["frr"] = f"{sum(alive)}/{want} daemons"
        counts["frr"] = [sum(alive), want]
        bgp = bgp or verify.check_bgp(rt, {n: c}, memo)[0]
        row["bgp"] = bgp["detail"]
        counts["bgp"] = [int(bgp["detail"].split("/", 1)[0]) if bgp["detail"][:1].isdigit() else 0,
                         len(c.fabric_ifaces)]
        oks += [sum(alive) == want, bgp["ok"]]
    status = verify.read_status(rt, n)  # read once: a ToR's is a few KB of JSON
    for ag in verify.check_agents(rt, {n: c}, {n: status}):  # none for routers and kernel-bonded hosts
        row["agent"] = "ok" if ag["ok"] else ag["detail"]
        oks.append(ag["ok"])
    st = status or {}
    ports = lacp_ports(c, st)
    if "agent" in row and c.mechanisms["lacp"] and c.role in ("tor", "host"):
        cd = sum(p["mux"] == "collecting_distributing" for p in ports)
        row["lacp"] = f"{cd}/{len(ports)} ports C/D"
        counts["lacp"] = [cd, len(ports)]
        oks.append(bool(ports) and cd == len(ports))
    if c.role == "tor":
        row["host_routes"] = len(st.get("host_routes", {}))
    late = [ms for t, ms in st.get("timers_late", {}).get("bins", []) if t > time.time() - 60]
    if "timers_late" in st:  # the lateness meter: the agent's worst late timer over the last minute
        row["late"] = f"{max(late):g} ms" if late else "-"
    if c.multipath and st.get("advertised_mbit"):  # an agg's FARE agent: what it advertises now
        bw = st["advertised_mbit"].values()
        row["fare"] = f"{min(bw)}-{max(bw)} Mbit/s, {st.get('updates', 0)} updates" + \
            (f", {st['failures']} failed (see {rt.agent_log(n)})" if st.get("failures") else "")
    row["ok"] = all(oks)
    row["_counts"] = counts
    row["_events"] = st.get("events", [])  # the agent's own timestamped events (the live view's list)
    return row


def bfd_sessions(rt: Runtime, n: str, timeout: float = verify.VTYSH_TIMEOUT) -> tuple[int, int] | None:
    """(up, total) of a router's BFD sessions as bfdd says, over its vty socket where this machine can
    reach it; None when bfdd does not answer."""
    data = rt.daemon_json(n, "bfdd", "show bfd peers json", timeout=timeout)
    if not isinstance(data, list):
        return None
    return sum(1 for p in data if p.get("status") == "up"), len(data)

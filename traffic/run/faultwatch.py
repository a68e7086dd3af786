"""What a fault changes in a running lab, once a second (``hpnlab fail --watch``): per router its BGP sessions'
TCP connections (counted from this process, so a hung bgpd costs no timeout), per ToR and host the LACP
members collecting/distributing and per ToR its host routes, as the agents last wrote them (a hung agent's
status goes stale, and the watch says so). It reports state, not packets: a change shows within a second of
the poll that sees it."""

from __future__ import annotations

from hpnlab.model.models import NodeConfig
from hpnlab.runtime.base import Runtime
from hpnlab.lifecycle.verify import HEARTBEAT_MAX_AGE, bgp_connections, read_status


def snapshot(rt: Runtime, cfgs: dict[str, NodeConfig]) -> dict[str, str]:
    """{'bgp s0r0a': '2/2 sessions', 'agent s0h0': 'ok', 'lacp s0h0': '4/4 ports C/D', 'host routes s0r0a': '2',
    ...}; an agent without a heartbeat: 'no heartbeat', and its LACP and host routes 'unknown'."""
    out: dict[str, str] = {}
    for n, c in sorted(cfgs.items()):
        if c.role != "host" and c.fabric_ifaces:
            tcp = bgp_connections(rt, n)
            if tcp is not None:
                out[f"bgp {n}"] = f"{tcp}/{len(c.fabric_ifaces)} sessions"
        if c.role not in ("tor", "host"):
            continue
        st = read_status(rt, n)
        if st is None or st["age"] > HEARTBEAT_MAX_AGE:  # hung or gone: what it last wrote is not now
            out[f"agent {n}"] = "no heartbeat"
            if c.mechanisms.get("lacp"):
                out[f"lacp {n}"] = "unknown"
            if c.role == "tor":
                out[f"host routes {n}"] = "unknown"
            continue
        out[f"agent {n}"] = "ok"
        ports = st.get("ports", []) if c.role == "tor" else [p for nic in st.get("nics", []) for p in nic["ports"]]
        if c.mechanisms.get("lacp") and ports:
            cd = sum(p.get("mux") == "collecting_distributing" for p in ports)
            out[f"lacp {n}"] = f"{cd}/{len(ports)} ports C/D"
        if c.role == "tor" and "host_routes" in st:
            out[f"host routes {n}"] = str(len(st["host_routes"]))
    return out


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Each key whose value differs, as 'KEY OLD -> NEW' ('-' for a key one side lacks), in key order."""
    return [f"{k} {before.get(k, '-')} -> {after.get(k, '-')}" for k in sorted(set(before) | set(after))
            if before.get(k) != after.get(k)]


class Watch:
    """The lab's state before a fault, and what each later poll finds changed since the poll before it."""

    def __init__(self, rt: Runtime, cfgs: dict[str, NodeConfig]):
        self.rt, self.cfgs = rt, cfgs
        self.before = self.last = snapshot(rt, cfgs)

    def poll(self) -> list[str]:
        now = snapshot(self.rt, self.cfgs)
        out, self.last = changes(self.last, now), now
        return out

    def healed(self) -> bool:
        """The last poll found the state the lab had before the fault."""
        return self.last == self.before

    def left(self) -> list[str]:
        """What still differs from the state before the fault."""
        return changes(self.before, self.last)

"""Who has which address: each host's address per rail and each dual-ToR set's subnet, read from the node
configs a deploy rendered (pure; ``hpnlab status`` prints them so a user can ping without ``ip addr``)."""

from __future__ import annotations

from hpnlab.model.models import NodeConfig


def host_addresses(c: NodeConfig) -> list[dict]:
    """A host's NICs: rail, address, its set's subnet and gateway (empty for a switch)."""
    return [{"rail": n.rail, "ip": n.ip, "subnet": n.subnet, "gateway": n.gateway} for n in c.nics or []]


def subnets(cfgs: dict[str, NodeConfig]) -> list[dict]:
    """One row per dual-ToR set (segment, rail): its subnet, gateway, ToRs and hosts, in segment/rail order."""
    sets: dict[str, dict] = {}
    for name, c in sorted(cfgs.items()):
        if c.role == "tor" and c.subnet:
            s = sets.setdefault(c.subnet, {"rail": c.rail, "subnet": c.subnet, "gateway": c.gateway, "tors": [],
                                           "hosts": []})
            s["segment"] = c.segment
            s["tors"].append(name)
        for n in c.nics or []:
            sets.setdefault(n.subnet, {"segment": None, "rail": n.rail, "subnet": n.subnet, "gateway": n.gateway,
                                       "tors": [], "hosts": []})["hosts"].append(f"{name} {n.ip}")
    return sorted(sets.values(), key=lambda s: (s["segment"] is None, s["segment"] or 0, s["rail"], s["subnet"]))


def cell(c: NodeConfig) -> str:
    """The status table's addresses column: 'r0 10.0.0.2, r1 10.0.1.2' for a host, a ToR's set subnet."""
    if c.role == "host":
        return ", ".join(f"r{a['rail']} {a['ip']}" for a in host_addresses(c))
    return f"set {c.subnet}" if c.role == "tor" and c.subnet else ""

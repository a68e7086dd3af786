"""link-down: set an interface down; the peer loses carrier."""

from hpnlab.traffic.faults.base import FaultKind, register


@register
class LinkDown(FaultKind):
    kind = "link-down"
    help = "set an interface down (the peer loses carrier); revert: up"
    needs_iface = True

    def apply(self, inj, f):
        for ifc in f.ifaces:
            inj.link(f.node, ifc, "down")

    def revert(self, rt, d, cfgs):
        for ifc in (d.get("iface") or "").split(","):
            if ifc:
                rt.run(d["node"], ["ip", "link", "set", ifc, "up"], check=False)

"""power-off: every interface of the node down at once."""

from hpnlab.traffic.faults.base import FaultKind, register


@register
class PowerOff(FaultKind):
    kind = "power-off"
    help = "every interface of the node down: all its peers lose carrier"

    def apply(self, inj, f):
        for ifc in inj.ifaces(f.node):
            inj.link(f.node, ifc, "down")

    def revert(self, rt, d, cfgs):
        for i in cfgs[d["node"]].iface_names:
            rt.run(d["node"], ["ip", "link", "set", i, "up"], check=False)

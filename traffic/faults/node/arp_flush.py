"""arp-flush: a ToR forgets its hosts' ARP entries at once (nothing to revert)."""

from hpnlab.errors import SpecError
from hpnlab.traffic.faults.base import FaultKind, register


@register
class ArpFlush(FaultKind):
    kind = "arp-flush"
    help = "age out a ToR's ARP entries on its host ports at once; relearned only from the hosts' next ARPs"

    def check(self, f, where, cfgs):
        if cfgs[f.node].role != "tor":
            raise SpecError(f"{where}.node: arp-flush ages a ToR's ARP table; {f.node} is a {cfgs[f.node].role}")

    def apply(self, inj, f):
        for i in inj.cfgs[f.node].interfaces:
            if i.kind == "access":
                inj.rt.run(f.node, ["ip", "neigh", "flush", "dev", i.name], what=f"{f.node}: neigh flush")

"""one-way: every frame one direction of a link is dropped; the link stays up (no carrier change)."""

from hpnlab.traffic.faults.base import FaultKind, nft_rules, register


@register
class OneWay(FaultKind):
    kind = "one-way"
    help = "drop every frame one direction of a link (egress of node:iface), the link stays up"
    needs_iface = True
    uses_nft = True

    def apply(self, inj, f):
        inj.nft(f.node, nft_rules(f.undo["nft"], [(ifc, "egress", "") for ifc in f.ifaces]), "one-way drop")

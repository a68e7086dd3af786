"""lacp-drop: only the LACPDUs of a link are lost, both ways."""

from hpnlab.traffic.faults.base import FaultKind, nft_rules, register


@register
class LacpDrop(FaultKind):
    kind = "lacp-drop"
    help = "drop only LACPDUs on a link, both directions"
    needs_iface = True
    uses_nft = True

    def apply(self, inj, f):
        rules = [(ifc, h, "ether type 0x8809") for ifc in f.ifaces for h in ("ingress", "egress")]
        inj.nft(f.node, nft_rules(f.undo["nft"], rules), "LACP drop")

"""peer-link-down: the direct link between the two ToRs of a stacked pair fails."""

from hpnlab.errors import SpecError
from hpnlab.traffic.faults.base import FaultKind, register
from hpnlab.traffic.faults.link.link_down import LinkDown


@register
class PeerLinkDown(FaultKind):
    kind = "peer-link-down"
    help = "the direct link of a stacked ToR pair goes down (stacked-dual-tor only)"

    def check(self, f, where, cfgs):
        if "peer" not in cfgs[f.node].iface_names:
            raise SpecError(f"{where}.node: {f.node} has no peer link; peer-link-down needs a ToR of access "
                            f"'stacked-dual-tor'")
        f.iface = "peer"

    def apply(self, inj, f):
        inj.link(f.node, "peer", "down")

    revert = LinkDown.revert

"""dataplane-dead: a router that forwards nothing while its control plane looks healthy (paper §4.1)."""

from hpnlab.errors import SpecError
from hpnlab.traffic.faults.base import FaultKind, nft_rules, nft_table, register


@register
class DataplaneDead(FaultKind):
    kind = "dataplane-dead"
    help = ("a router forwards nothing (nftables forward drop) and its peer link is dead, while all it sends and "
            "receives itself (BGP, BFD, LACP, micro-BFD, heartbeats) flows: no control-plane timer sees it "
            "(paper §4.1)")

    def check(self, f, where, cfgs):
        if cfgs[f.node].role == "host":
            raise SpecError(f"{where}.node: {f.node} is a host; dataplane-dead stops a router's forwarding")

    uses_nft = True  # the peer link's drop, where there is one

    def prepare(self, inj, f, fid):
        f.undo["nft_inet"] = nft_table(fid)

    def apply(self, inj, f):
        # transit dropped; the router's own packets (local in/out) are not in the forward hook
        rules = (f"table inet {f.undo['nft_inet']} {{\n  chain transit {{\n"
                 f"    type filter hook forward priority -500; policy drop;\n  }}\n}}\n")
        if "peer" in inj.ifaces(f.node):  # the peer link is a data-plane port: its sync dies with it
            rules += nft_rules(f.undo["nft"], [("peer", h, "") for h in ("ingress", "egress")])
        inj.nft(f.node, rules, "dataplane-dead")

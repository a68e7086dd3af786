"""bgp-shutdown: one BGP session administratively shut (FRR's neighbor IFACE shutdown)."""

from hpnlab.errors import SpecError
from hpnlab.machine.proc import run
from hpnlab.traffic.faults.base import FaultKind, register


def _neighbors(rt, node: str, asn: int, ifaces: list[str], no: bool) -> list[str]:
    return rt.vtysh_argv(node, ["configure terminal", f"router bgp {asn}",
                                *(f"{'no ' if no else ''}neighbor {ifc} shutdown" for ifc in ifaces)])


@register
class BgpShutdown(FaultKind):
    kind = "bgp-shutdown"
    help = "administratively shut the BGP session on node:iface (neighbor IFACE shutdown)"
    needs_iface = True

    def check(self, f, where, cfgs):
        if cfgs[f.node].role == "host":
            raise SpecError(f"{where}.node: {f.node} is a host and runs no BGP; pick a ToR, agg or core")

    def apply(self, inj, f):
        run(_neighbors(inj.rt, f.node, inj.cfgs[f.node].asn, f.ifaces, no=False), what=f"{f.node}: vtysh")

    def revert(self, rt, d, cfgs):
        ifaces = [i for i in (d.get("iface") or "").split(",") if i]
        run(_neighbors(rt, d["node"], cfgs[d["node"]].asn, ifaces, no=True), check=False)

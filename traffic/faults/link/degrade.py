"""degrade: a link runs at a fraction of its capacity, both ways (a bundle that lost members, a port
that came up at a lower speed); the link stays up and keeps its queue. Reverted to the spec's rate.

Only a link with a capacity (links.<class> or links.per_link) can be degraded: a fraction of an
unshaped veth is undefined. Under ``multipath.mode: fare`` the aggs see the new rate on their own
port and re-weigh (hpnlab.node.agents.fare), as a switch sees its port's speed. A switch port with priority
queues (spec qos) keeps them: its htb (or its prio/ets's tbf) takes the lower rate, the queues stay."""

from hpnlab.errors import SpecError
from hpnlab.model.capacity import port_argvs
from hpnlab.traffic.faults.base import FaultKind, register


@register
class Degrade(FaultKind):
    kind = "degrade"
    help = "a link at a fraction of its capacity, both ends (fraction: 0.5); revert: the spec's rate"
    needs_iface = True
    params = {"fraction": 0.5}

    def check_params(self, f, where):
        if not 0 < f.params["fraction"] < 1:
            raise SpecError(f"{where}.fraction: give the share of the capacity left, between 0 and 1 (e.g. 0.5)")
        if len(f.ifaces) != 1:
            raise SpecError(f"{where}.iface: degrade acts on one link; give one interface")

    def check(self, f, where, cfgs):
        ifc = cfgs[f.node].iface(f.iface)
        if not ifc.shape:
            raise SpecError(f"{where}.iface: {f.node}:{f.iface} has no capacity to degrade; give its class a "
                            f"rate in the spec (links.{ifc.kind}) or choose a shaped link")

    def prepare(self, inj, f, fid):
        ifc = inj.cfgs[f.node].iface(f.iface)
        f.undo["ends"] = [[f.node, f.iface, ifc.shape], [ifc.peer, ifc.peer_iface, ifc.shape]]

    def apply(self, inj, f):
        for node, iface, shape in f.undo["ends"]:
            low = {**shape, "rate_kbit": max(1, round(shape["rate_kbit"] * f.params["fraction"]))}
            for argv in port_argvs(inj.cfgs[node].plain(), iface, low, rates_only=True):
                inj.rt.run(node, argv, what=f"{node}: {iface} degraded")

    def revert(self, rt, d, cfgs):
        for node, iface, shape in d.get("undo", {}).get("ends", []):
            for argv in port_argvs(cfgs[node].plain() if node in cfgs else {"role": "host"}, iface, shape,
                                   rates_only=True):
                rt.run(node, argv, check=False)


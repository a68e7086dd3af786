"""bursty-loss: losses in bursts (Gilbert-Elliott): the link moves between a good and a bad state once per
frame, with p % a chance to go bad and r % a chance to come back; in the bad state bad_loss % of the
frames are lost, in the good state good_loss %. The share lost is about p/(p+r) x bad_loss, in bursts of
about 100/r frames (a connector that loses contact under vibration, a failing laser).

Where the kernel can delete a set element from the packet path (nftables dynset delete, Linux 5.4+),
the state is one element of a set on the receiving end's ingress, as the other gray faults act there.
Elsewhere netem's gemodel does the same on the sending end's egress queue (a netem drop is not reported
to a sending host's TCP); a kernel with neither refuses the fault (kernel.py, feature nft-dynset)."""

from hpnlab.machine import kernel
from hpnlab.errors import SpecError
from hpnlab.node.plan import tbf_args
from hpnlab.traffic.faults.gray import wire
from hpnlab.traffic.faults.base import FaultKind, register


def ge_rules(table: str, iface: str, p: float, r: float, bad_loss: float, good_loss: float) -> str:
    """The nftables table: the set holds this interface's index while the link is bad (the state), and
    each frame first draws its state's loss, then its transition (goto: one chain per frame)."""
    def lose(pct: float) -> list[str]:
        return [f"{wire.draw(pct)}counter drop"] if pct > 0 else []
    # the size is large because an element deleted by a frame lingers, dead, until the set's garbage
    # collection: with a small size a burst of transitions would find the set full and stop adding
    extra = "\n".join([
        "  set bad {", "    type iface_index; flags dynamic; size 65535;", "  }",
        "  chain bad {", f"    {wire.draw(r)}delete @bad {{ meta iif }}", *[f"    {x}" for x in lose(bad_loss)], "  }",
        "  chain good {", f"    {wire.draw(p)}add @bad {{ meta iif }}", *[f"    {x}" for x in lose(good_loss)], "  }"])
    return wire.table_rules(table, iface, ["meta iif @bad goto bad", "goto good"], extra)


def use_netem() -> bool:
    return not kernel.has("nft-dynset")


@register
class BurstyLoss(FaultKind):
    kind = "bursty-loss"
    help = ("Gilbert-Elliott loss on the frames node:iface sends (both: 1 also those it receives): p % per frame "
            "to go bad, r % to come back, bad_loss % / good_loss % lost in each state")
    needs_iface = True
    params = {"p": 1.0, "r": 30.0, "bad_loss": 100.0, "good_loss": 0.0, "both": 0.0}

    def check_params(self, f, where):
        wire.check_both(f, where)
        wire.check_rate(f, where, "p")
        wire.check_rate(f, where, "r")
        for k in ("bad_loss", "good_loss"):
            if not 0 <= f.params[k] <= 100:
                raise SpecError(f"{where}.{k}: give a percentage from 0 to 100")
        if f.params["bad_loss"] <= f.params["good_loss"]:
            raise SpecError(f"{where}.bad_loss: the bad state must lose more than the good one "
                            f"({f.params['bad_loss']:g} <= good_loss {f.params['good_loss']:g})")

    def check(self, f, where, cfgs):
        wire.check_frames(f, where, cfgs)
        if use_netem() and not kernel.has("netem"):
            raise SpecError(f"{where}.kind: bursty-loss needs nftables' set delete from the packet path (Linux "
                            f"5.4+) or the netem qdisc, and kernel {kernel.release()} has neither; use silent-loss")

    def prepare(self, inj, f, fid):
        if use_netem():  # the sending ends' egress queues: node:iface (and its peer with both)
            ifc = inj.cfgs[f.node].iface(f.iface)
            out = [[f.node, f.iface, ifc.shape]]
            if f.params["both"]:
                out.append([ifc.peer, ifc.peer_iface, inj.cfgs[ifc.peer].iface(ifc.peer_iface).shape])
            f.undo["netem"] = out
        else:
            wire.prepare(inj, f, fid)

    def apply(self, inj, f):
        p = f.params
        if "netem" not in f.undo:
            for node, ifc, table in f.undo["wire"]:
                inj.nft(node, ge_rules(table, ifc, p["p"], p["r"], p["bad_loss"], p["good_loss"]), "bursty loss")
            return
        # netem's gemodel takes p, r, 1-h and 1-k in percent: 1-h is the bad state's loss, 1-k the good's
        ge = ["loss", "gemodel", f"{p['p']:g}%", f"{p['r']:g}%", f"{p['bad_loss']:g}%", f"{p['good_loss']:g}%"]
        for node, ifc, shape in f.undo["netem"]:
            if shape:  # under the link's rate, as impair's delay is
                inj.rt.run(node, ["tc", "qdisc", "replace", "dev", ifc, "root", "handle", "1:", *tbf_args(shape)],
                           what=f"{node}: {ifc} rate")
                inj.rt.run(node, ["tc", "qdisc", "replace", "dev", ifc, "parent", "1:1", "handle", "10:", "netem",
                                  *ge], what=f"{node}: {ifc} bursty loss")
            else:
                inj.rt.run(node, ["tc", "qdisc", "replace", "dev", ifc, "root", "handle", "1:", "netem", *ge],
                           what=f"{node}: {ifc} bursty loss")

    def revert(self, rt, d, cfgs):
        wire.revert(rt, d)
        for node, ifc, shape in d.get("undo", {}).get("netem", []):
            rt.run(node, ["tc", "qdisc", "del", "dev", ifc, "root"], check=False)
            if shape:
                rt.run(node, ["tc", "qdisc", "replace", "dev", ifc, "root", *tbf_args(shape)], check=False)

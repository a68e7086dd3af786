"""silent-loss: a share of the frames on a link is lost on the wire; the link stays up, no counter on
either end says so (a dirty optic, a bad cable: the gray failure BFD's three-in-a-row misses)."""

from hpnlab.traffic.faults import wire
from hpnlab.traffic.faults.base import FaultKind, register


@register
class SilentLoss(FaultKind):
    kind = "silent-loss"
    help = ("lose rate % of the frames node:iface sends, on the wire (both: 1 also those it receives); "
            "the link stays up, nothing counts them")
    needs_iface = True
    params = {"rate": 1.0, "both": 0.0}

    def check_params(self, f, where):
        wire.check_both(f, where)
        wire.check_rate(f, where)

    def check(self, f, where, cfgs):
        wire.check_frames(f, where, cfgs)

    def prepare(self, inj, f, fid):
        wire.prepare(inj, f, fid)

    def apply(self, inj, f):
        wire.apply(inj, f, [f"{wire.draw(f.params['rate'])}counter drop"], what="silent loss")

    def revert(self, rt, d, cfgs):
        wire.revert(rt, d)

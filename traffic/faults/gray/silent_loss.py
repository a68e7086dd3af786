"""silent-loss: a share of the frames on a link is lost on the wire; the link stays up, no counter on
either end says so (a dirty optic, a bad cable: the gray failure BFD's three-in-a-row misses)."""

from hpnlab.traffic.faults.gray import wire
from hpnlab.traffic.faults.base import register


@register
class SilentLoss(wire.WireFault):
    kind = "silent-loss"
    help = ("lose rate % of the frames node:iface sends, on the wire (both: 1 also those it receives); "
            "the link stays up, nothing counts them")
    what = "silent loss"

    def rules(self, f):
        return [f"{wire.draw(f.params['rate'])}counter drop"]

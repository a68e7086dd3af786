"""corrupt: a share of the IPv4 frames on a link arrive with a bit error the receiver catches: their
header checksum is flipped on the wire, so the next hop's IP layer drops them and counts each
(IpExtInCsumErrors in that node's nstat). A loss the receiver can see, the sender cannot."""

from hpnlab.traffic.faults import wire
from hpnlab.traffic.faults.base import FaultKind, register


@register
class Corrupt(FaultKind):
    kind = "corrupt"
    help = ("flip the IPv4 header checksum of rate % of the frames node:iface sends (both: 1 also those it "
            "receives): the next hop drops and counts them (IpExtInCsumErrors)")
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
        # a raw write (@nh) is not checksummed by nftables, unlike a named IP field's
        rule = f"meta protocol ip {wire.draw(f.params['rate'])}@nh,80,16 set @nh,80,16 ^ 0xffff counter"
        wire.apply(inj, f, [rule], what="corruption")

    def revert(self, rt, d, cfgs):
        wire.revert(rt, d)

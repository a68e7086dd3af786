"""corrupt: a share of the IPv4 frames on a link arrive with a bit error the receiver catches: their
header checksum is flipped on the wire, so the next hop's IP layer drops them and counts each
(IpExtInCsumErrors in that node's nstat). A loss the receiver can see, the sender cannot."""

from hpnlab.traffic.faults.gray import wire
from hpnlab.traffic.faults.base import register


@register
class Corrupt(wire.WireFault):
    kind = "corrupt"
    help = ("flip the IPv4 header checksum of rate % of the frames node:iface sends (both: 1 also those it "
            "receives): the next hop drops and counts them (IpExtInCsumErrors)")
    what = "corruption"

    def rules(self, f):
        # a raw write (@nh) is not checksummed by nftables, unlike a named IP field's
        return [f"meta protocol ip {wire.draw(f.params['rate'])}@nh,80,16 set @nh,80,16 ^ 0xffff counter"]

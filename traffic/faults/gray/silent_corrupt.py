"""silent-corrupt: a share of the data frames on a link arrive with four payload bytes changed and
checksums that still pass, so the bytes reach the application (a switch chip's bit flip after the
checksum was computed). No counter anywhere says so; only the application's own check can.

The bytes changed: 4 bytes at offset 512 of the TCP or UDP header (XOR 0x5a5a5a5a), in IPv4 frames
longer than 600 bytes, so control traffic (ACKs, BGP keepalives, BFD, probes) passes untouched and only
bulk data is hit. nftables' payload write leaves the checksums passing at the receiver (measured: no
TcpInCsumErrors or UdpInCsumErrors, the changed bytes delivered)."""

from hpnlab.traffic.faults.gray import wire
from hpnlab.traffic.faults.base import register

OFFSET_BITS = 512 * 8
MIN_IP_LENGTH = 600


@register
class SilentCorrupt(wire.WireFault):
    kind = "silent-corrupt"
    help = ("change 4 payload bytes of rate % of the data frames (>600 B) node:iface sends, checksums "
            "passing: they reach the application (both: 1 also those it receives)")
    what = "silent corruption"

    def rules(self, f):
        return [f"meta protocol ip ip protocol {{ tcp, udp }} ip length > {MIN_IP_LENGTH} "
                f"{wire.draw(f.params['rate'])}@th,{OFFSET_BITS},32 set @th,{OFFSET_BITS},32 ^ 0x5a5a5a5a counter"]

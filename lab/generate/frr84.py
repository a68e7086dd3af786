"""What FRR 8.4's bgpd does with the link-bandwidth community it receives, as arithmetic: each multipath
gets the weight floor(100 x its bandwidth / the sum of all paths' bandwidths), and a weight of 0 becomes 1
(measured here: 20 and 10 Mbit/s give 66 and 33; 20, 20, 20 and 10 give 28, 28, 28 and 14). zebra hands
those weights to the kernel, whose hash-threshold splits flows in proportion. FRR 10.0 scales to 1..255
of the largest instead, which this module does not model."""

from __future__ import annotations


def weights(bandwidths: list[float]) -> list[int]:
    total = sum(bandwidths)
    if total <= 0:
        return [1] * len(bandwidths)
    return [max(1, int(100 * b // total)) for b in bandwidths]


def shares(bandwidths: list[float]) -> list[float]:
    """The share of the hash space each path gets once its bandwidth is an 8.4 weight."""
    w = weights(bandwidths)
    return [x / sum(w) for x in w]

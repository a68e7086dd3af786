"""hpnlab: emulate Alibaba HPN's non-stacked dual-ToR, dual-plane fabric on Linux, packet by packet."""

__version__ = "0.1.0"

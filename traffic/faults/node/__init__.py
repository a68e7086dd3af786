"""Fault kinds on a node: hang, power-off, dataplane-dead, bgp-shutdown, arp-flush."""

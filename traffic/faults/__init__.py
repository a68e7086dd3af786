"""Faults: one class per kind, one file each in this package (base.py holds what they share). A new kind
is one file with a ``@register``ed FaultKind subclass, imported here; ``hpnlab fail --list``,
``Lab.fault``, experiment files and the docs read the registry."""

from hpnlab.traffic.faults.base import (REGISTRY, Fault, FaultKind, Injector, get, kinds, names,  # noqa: F401
                                        node_pids, nft_rules, nft_table, parse, register, revert_recorded,
                                        revert_state, send_signal)
from hpnlab.traffic.faults import (arp_flush, bgp_shutdown, dataplane_dead, hang, lacp_drop,  # noqa: F401,E402
                                   link_down, link_flap, one_way, peer_link_down, power_off)

# the order `hpnlab fail --list` prints them in
_ORDER = ["link-down", "link-flap", "one-way", "lacp-drop", "hang", "power-off", "bgp-shutdown", "arp-flush",
          "dataplane-dead", "peer-link-down"]
KINDS = {k: REGISTRY[k].help for k in _ORDER + [k for k in REGISTRY if k not in _ORDER]}

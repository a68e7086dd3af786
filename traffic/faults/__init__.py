"""Faults: one class per kind, one file each, grouped by what they hit: link/ (a link or a port), node/
(a node) and gray/ (the wire's silent and bursty failures); base.py holds what they share. A new kind is
one file in one of these folders with a ``@register``ed FaultKind subclass (every module under this
package is imported);
``hpnlab fail --list``, ``Lab.fault``, experiment files and the docs read the registry."""

import importlib
import pkgutil


from hpnlab.traffic.faults.base import (REGISTRY, Fault, FaultKind, Injector, get, kinds, names,  # noqa: F401
                                        node_pids, nft_rules, nft_table, parse, register, revert_recorded,
                                        revert_state, send_signal)

for _m in sorted(m.name for m in pkgutil.walk_packages(__path__, f"{__name__}.")):
    importlib.import_module(_m)

# the order `hpnlab fail --list` prints them in
_ORDER = ["link-down", "link-flap", "one-way", "lacp-drop", "hang", "power-off", "bgp-shutdown", "arp-flush",
          "dataplane-dead", "peer-link-down", "degrade", "silent-loss", "bursty-loss", "corrupt", "silent-corrupt"]
KINDS = {k: REGISTRY[k].help for k in _ORDER + [k for k in REGISTRY if k not in _ORDER]}

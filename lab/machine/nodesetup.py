"""Node configuration as data, for the controller: the plan itself (sysctls, ``ip -batch``, ``tc -batch``,
nftables) lives in hpnlab.node.plan, so that a node can configure itself from its node.json inside a
container; this module re-exports it for the controller, with the parser of a bond's state."""

from __future__ import annotations

from hpnlab.node.agents.bondhost import parse_bonding  # noqa: F401
from hpnlab.node.plan import (ARP_DUP_MARK, NFT_TABLE, agent_module, agent_needs_frr, bond_name, bonding_available,  # noqa: F401
                              FABRIC_KINDS, RA_HOLD_TABLE, host_driver, ip_batch, nft_ruleset, ra_hold_ruleset,
                              ra_listen_ruleset, ra_release_ruleset, sysctls)

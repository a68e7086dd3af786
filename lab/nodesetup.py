"""Node configuration as data, for the controller: the plan itself (sysctls, ``ip -batch``, ``tc -batch``,
nftables) lives in hpnlab.node.plan, so that a node can configure itself from its node.json inside a
container; this module re-exports it and adds what only the controller reads (a bond's state)."""

from __future__ import annotations

from hpnlab.node.plan import (ARP_DUP_MARK, NFT_TABLE, agent_module, bond_name, bonding_available,  # noqa: F401
                              host_driver, ip_batch, nft_ruleset, sysctls)


def parse_bonding(text: str) -> list[dict]:
    """Per-slave partner details from /proc/net/bonding/<bond> (802.3ad mode)."""
    slaves: list[dict] = []
    cur: dict | None = None
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Slave Interface:"):
            cur = {"slave": line.split(":", 1)[1].strip()}
            slaves.append(cur)
            section = ""
        elif cur is None:
            continue
        elif line.startswith("details partner lacp pdu"):
            section = "partner"
        elif line.startswith("details actor lacp pdu"):
            section = "actor"
        elif line.startswith("Aggregator ID:"):
            cur["aggregator"] = int(line.split(":", 1)[1])
        elif line.startswith("MII Status:"):
            cur["mii"] = line.split(":", 1)[1].strip()
        elif section == "partner" and line.startswith("system mac address:"):
            cur["partner_system"] = line.split(":", 1)[1].strip().lower()
        elif section == "partner" and line.startswith("port number:"):
            cur["partner_port"] = int(line.split(":", 1)[1])
        elif section == "partner" and line.startswith("oper key:"):
            cur["partner_key"] = int(line.split(":", 1)[1])
    return slaves

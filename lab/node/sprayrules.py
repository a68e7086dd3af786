"""The nftables rules and routing-table numbers of a spraying ToR (multipath.mode spray, spray-weighted,
flowlet, dlb), pure: the node plan (hpnlab.node.plan) writes them at boot and the ToR's spray keeper
(hpnlab.node.agents.spray) rewrites them as routes and queues change, so both build them here."""

from __future__ import annotations

SPRAY_NFT_TABLE = "hpnlab_spray"  # multipath.mode spray: a ToR's per-packet marks
SPRAY_TABLE = 101  # uplink k's routing table and fwmark: SPRAY_TABLE + k (table_of)
FLOW = "ip saddr . ip daddr . meta l4proto . th sport . th dport"  # a flowlet's key: the 5-tuple


def table_of(k: int) -> int:
    """The routing table (and the fwmark that selects it) of the k-th uplink (sorted by name)."""
    return SPRAY_TABLE + k


def spray_rule(ports: list[str], shares: list[int], match: str = "") -> str:
    """One nftables rule: packets from the host ports (to ``match``) marked for uplink k in turn, uplink k
    getting shares[k] of every sum(shares) packets (numgen's ranges; a zero share gets none)."""
    total, lo, ranges = sum(shares), 0, []
    for k, w in enumerate(shares):
        if w:
            ranges.append(f"{lo}{'' if w == 1 else f'-{lo + w - 1}'} : {table_of(k)}")
            lo += w
    iif = ", ".join(f'"{p}"' for p in ports)
    return (f"iifname {{ {iif} }} {match}meta mark set numgen inc mod {total} map {{ {', '.join(ranges)} }}"
            + (" accept" if match else ""))


def flowlet_lines(ports: list[str], n: int, gap_ms: float) -> tuple[list[str], list[str]]:
    """flowlet: one timed set per uplink holding the flows sent on it lately (every packet refreshes its
    flow's timeout); a packet of a flow in uplink k's set keeps uplink k, any other (a new flow, or one idle
    for longer than the gap) takes the next uplink in turn and joins that uplink's set."""
    iif = "iifname { " + ", ".join(f'"{p}"' for p in ports) + " }"
    ms = max(1, round(gap_ms))
    sets = [f"set flowlet{k} {{ type ipv4_addr . ipv4_addr . inet_proto . inet_service . inet_service; "
            f"flags dynamic, timeout; timeout {ms}ms; }}" for k in range(n)]
    rules = [f"{iif} {FLOW} @flowlet{k} update @flowlet{k} {{ {FLOW} }} meta mark set {table_of(k)} accept"
             for k in range(n)]
    rules.append(spray_rule(ports, [1] * n))
    rules += [f"{iif} meta mark {table_of(k)} add @flowlet{k} {{ {FLOW} }}" for k in range(n)]
    return sets, rules

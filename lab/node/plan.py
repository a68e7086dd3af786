"""Node configuration as data: sysctls, ``ip -batch`` lines, ``tc -batch`` lines (link capacity) and an
nftables ruleset per node, computed from the node's node.json alone.

Pure functions with only the standard library, so the same plan is applied by every runtime from outside
(``ip netns exec``, /run/netns links of containers) and by a node configuring itself at boot
(hpnlab.node.agents.boot, inside a container image that carries only hpnlab.node); tests read it without root.
"""

from __future__ import annotations

import os
from pathlib import Path

from hpnlab.node import qos
from hpnlab.node.sprayrules import SPRAY_NFT_TABLE, SPRAY_TABLE, flowlet_lines, spray_rule  # noqa: F401

# Every lab link's MTU, the same on every runtime: the namespace runtime creates its veths with it,
# containerlab's topology sets it on each link (containerlab's own default is 9500), and a node sets it
# on its interfaces at boot. tbf's bucket is sized from the frame it gives (burst_bytes).
MTU = 1500
MTU_FRAME = MTU + 14  # with the Ethernet header

ARP_DUP_MARK = 0x4850  # "HP": set on the original and the copy so neither is duplicated again
NFT_TABLE = "hpnlab"
RA_HOLD_TABLE = "hpnlab_ra_hold"  # a ToR's Router Advertisements, held back while the lab starts
SPRAY_RULE_PREF = 110  # its rule: after table 10's (pref 100)
FABRIC_KINDS = ("uplink", "core")  # a router's interfaces with a BGP unnumbered session
# Sysctls a plan sets that older kernels lack -> the feature (hpnlab.machine.kernel) that brings them: a node
# leaves them out where its kernel has no such file, and says so.
OPTIONAL_SYSCTLS = {"net.ipv4.fib_multipath_hash_seed": "hash-seed",   # Linux 6.11
                    "net.ipv4.fib_multipath_hash_fields": "hash-fields"}  # Linux 5.14
# The kernel's neighbour (ARP, NDP) timers and their defaults (net/ipv4/arp.c, net/ipv6/ndisc.c): how long
# an entry stays reachable, the probe's retransmit, the wait before the first probe (seconds) and how long
# an unused entry stays before the periodic collection drops it (seconds). They are per interface: a new
# namespace has no neigh.default of its own (only the first namespace has, with the table-wide gc_interval
# and gc_thresh*), and each device copies the first namespace's defaults when it is made. A dilated node
# (time_dilation k) runs each k times slower on every interface of its own (``neigh_sysctls``).
NEIGH_TIMERS = {"base_reachable_time_ms": 30000, "retrans_time_ms": 1000, "delay_first_probe_time": 5,
                "gc_stale_time": 60}


def sysctls(cfg: dict, skip: frozenset[str] | set[str] | list[str] = ()) -> dict[str, int | str]:
    """Every sysctl of the node, less ``skip``: keys this kernel lacks (hpnlab.machine.kernel.assess decides)."""
    out = {k: v for k, v in cfg["sysctls"].items() if k not in skip}
    if cfg["role"] != "host":
        # BGP unnumbered speaks over each fabric link's IPv6 link-local address, and zebra sends and learns
        # the Router Advertisements that name it. Duplicate address detection keeps a new link-local
        # address unusable for 1-2 s after its link comes up (a random wait of up to 1 s, one probe, 1 s
        # more), and the lab's sessions waited for it. On a point-to-point veth whose two MACs the lab
        # assigns, no address can be a duplicate.
        for name in cfg.get("fabric_ifaces") or []:
            out[f"net.ipv6.conf.{name}.accept_dad"] = 0
    if cfg["role"] == "tor":
        for hp in cfg["host_ports"]:
            ifc = hp["iface"]
            out[f"net.ipv4.conf.{ifc}.rp_filter"] = 0
            out[f"net.ipv6.conf.{ifc}.disable_ipv6"] = 1
            # ARP proxy: answer every host ARP with our (virtual) MAC; the default 80 ms delay would hurt.
            out[f"net.ipv4.conf.{ifc}.proxy_arp"] = 1 if cfg["mechanisms"]["arp_proxy"] else 0
            out[f"net.ipv4.neigh.{ifc}.proxy_delay"] = 0
    if cfg["role"] == "host":
        out["net.ipv6.conf.all.disable_ipv6"] = 1
        for nic in cfg["nics"]:
            for ifc in nic["ports"]:
                out[f"net.ipv4.conf.{ifc}.rp_filter"] = 0
                out[f"net.ipv4.conf.{ifc}.arp_ignore"] = 1
    out.update(neigh_sysctls(cfg))
    return out


def neigh_sysctls(cfg: dict) -> dict[str, int]:
    """A dilated node's neighbour timers (``NEIGH_TIMERS`` x time_dilation) on each of its interfaces: IPv4
    (ARP) everywhere, IPv6 (NDP) too on a router's fabric links, where BGP unnumbered resolves its peers.
    None at k = 1: the interfaces keep what the kernel gave them."""
    k = cfg.get("time_dilation", 1)
    if k <= 1:
        return {}
    out = {f"net.ipv4.neigh.{i['name']}.{key}": v * k for i in cfg["interfaces"] for key, v in NEIGH_TIMERS.items()}
    if cfg["role"] != "host":
        out.update({f"net.ipv6.neigh.{name}.{key}": v * k for name in cfg.get("fabric_ifaces") or []
                    for key, v in NEIGH_TIMERS.items()})
    return out


def bond_name(rail: int) -> str:
    return f"bond{rail}"


# Why: TCP hands a veth TSO/GSO super-packets (54-57 KB measured here), and a veth, which takes GSO, never
# cuts them into frames (a NIC would, after the egress hook and the qdisc): one crosses every hop of the
# fabric whole, to the receiving socket. So every per-packet action of the lab (impair loss=, the nftables
# drops of the faults, a tbf's byte-limited queue) took or kept ~45 frames at once: "1 % loss"
# dropped one 65,226-byte skb and the sender resent 46 segments. A switch sees MTU frames. gso_max_segs 1
# makes the sender's TCP build one-MSS skbs (tcp_tso_segs caps its segments per skb at the route's device's
# gso_max_segs), so every packet is a frame from the socket on. Chosen over turning TSO/GSO off with ethtool:
# it is an rtnetlink attribute that ``ip link set`` changes on an existing device (Linux has taken it in
# do_setlink since before 5.19 bounded it by tso_max_segs; measured on 6.18, run on Debian 12's 6.1 in the
# VM), so it is one more ``ip -batch`` line of the same plan on every runtime (a container sets it on the
# links containerlab made), with no ethtool binary in the images or on the machine, and no ioctl code. GRO,
# the receive side's merging, is off on a veth unless an XDP program or ``ethtool -K gro on`` gives it NAPI,
# and nothing in a lab does: forwarded frames stay frames. Routers get it too (what they send themselves is
# BGP and BFD, but a ToR's or agg's own TCP then behaves alike). ``links.offloads: true`` leaves the kernel's
# default: an unshaped lab's TCP runs ~16x faster per CPU second, with ~45 frames per per-packet action
# (docs/design.md, "Interfaces: MTU frames", has the figures).
def offload_lines(cfg: dict) -> list[str]:
    """One ``ip -batch`` line per interface capping its GSO at one segment, unless the spec keeps offloads."""
    if cfg.get("offloads"):
        return []
    return [f"link set dev {i['name']} gso_max_segs 1" for i in cfg["interfaces"]]


def ip_batch(cfg: dict, driver: str = "userspace") -> list[str]:
    """Addresses and link state. MACs are set where the runtime creates the links."""
    lines = ["link set lo up", *offload_lines(cfg)]
    role = cfg["role"]
    if role != "host":
        lines.append(f"address replace {cfg['router_id']}/32 dev lo")
        for i in cfg["interfaces"]:
            lines.append(f"link set {i['name']} up")
        if role == "tor":
            for hp in cfg["host_ports"]:
                lines.append(f"address replace {cfg['gateway']}/32 dev {hp['iface']} scope link")
            # ARP-learned /32s forward at once from table 10, as a switch's host table does
            # (whether they are also advertised in BGP is mechanisms.host_routes).
            lines.append(f"rule add pref 100 lookup {cfg['table']}")
            # The set's subnet, originated in BGP by both ToRs of the set; the blackhole only catches
            # unknown hosts. A kernel route (zebra imports it) instead of a static one: no staticd.
            lines.append(f"route replace blackhole {cfg['subnet']}")
            lines += spray_rules(cfg)
        return lines
    for nic in cfg["nics"]:
        if driver == "bond":
            b = bond_name(nic["rail"])
            lacp = cfg["lacp"]  # the host side's actor: what the userspace agent sends, from the bond
            lines.append(f"link add {b} address {nic['mac']} type bond mode 802.3ad "
                         f"lacp_rate {'fast' if lacp['fast_rate'] else 'slow'} ad_actor_sys_prio "
                         f"{lacp['system_priority']} ad_select stable miimon 100 xmit_hash_policy layer3+4")
            for ifc in nic["ports"]:
                lines += [f"link set {ifc} down", f"link set {ifc} master {b}"]
            if not cfg.get("offloads"):  # its own: a bond takes its members' TSO limits, not their GSO caps
                lines.append(f"link set dev {b} gso_max_segs 1")
            lines += [f"address replace {nic['ip']}/32 dev {b}", f"link set {b} up"]
            lines.append(f"route replace {nic['subnet']} dev {b} src {nic['ip']}")
            lines += [f"route replace {s} via {nic['gateway']} dev {b} onlink src {nic['ip']}"
                      for s in nic["remote_subnets"]]
        else:
            for ifc in nic["ports"]:
                lines += [f"address replace {nic['ip']}/32 dev {ifc}", f"link set {ifc} up"]
    return lines


def spray_uplinks(cfg: dict) -> list[str]:
    """A spraying ToR's uplinks, in the order of their marks and tables (none: the ToR hashes)."""
    mp = cfg.get("multipath") or {}
    return list(mp.get("uplinks") or []) if cfg["role"] == "tor" else []


def spray_rules(cfg: dict) -> list[str]:
    """A spraying ToR's policy rules: a packet marked for uplink k looks up uplink k's table (after table 10,
    so the ToR's own hosts are reached directly; hpnlab.node.agents.spray fills the tables)."""
    return [f"rule add pref {SPRAY_RULE_PREF + k} fwmark {SPRAY_TABLE + k} lookup {SPRAY_TABLE + k}"
            for k in range(len(spray_uplinks(cfg)))]


def spray_ruleset(cfg: dict) -> str | None:
    """A spraying ToR marks each packet from its hosts for the next uplink in turn (numgen: one counter per
    rule, so consecutive packets of a flow alternate). Prerouting at mangle priority: before the route
    lookup that reads the mark."""
    ups = spray_uplinks(cfg)
    if not ups:
        return None
    ports = [hp["iface"] for hp in cfg["host_ports"]]
    mp = cfg["multipath"]
    if mp["mode"] == "flowlet":
        sets, rules = flowlet_lines(ports, len(ups), mp["flowlet_gap_ms"])
    else:
        sets, rules = [], [spray_rule(ports, [1] * len(ups))]
    return (f"table ip {SPRAY_NFT_TABLE} {{\n" + "".join(f"  {x}\n" for x in sets) + "  chain spray {\n"
            "    type filter hook prerouting priority mangle; policy accept;\n"
            + "".join(f"    {r}\n" for r in rules) + "  }\n}\n")


def nft_ruleset(cfg: dict) -> str | None:
    """Every nftables table of the node: its mechanisms' (below) and a switch's DSCP -> queue map (qos)."""
    parts = [r for r in (mechanism_ruleset(cfg), qos.nft_ruleset(cfg)) if r]
    return "".join(parts) or None


def mechanism_ruleset(cfg: dict) -> str | None:
    """Host ARP broadcast module: every ARP leaving one port of a NIC is copied out of the other.

    netdev egress + dup, with a mark so the copy is not copied back (tc mirred both ways loops). The same
    rules serve a kernel bond: the bond transmits through its slave's own queue, where the slave's egress
    hook sees the frame. Without them a bonded host's ARP (and its replies to the ToRs' probes: both ToRs
    share one MAC, so the bond's layer-2 hash sends them all out of one port) reaches one ToR only, and
    the other ToR of the set never learns, or soon forgets, its hosts' /32s.
    """
    if cfg["role"] == "tor":
        return spray_ruleset(cfg)
    if cfg["role"] != "host" or not cfg["mechanisms"]["arp_duplication"]:
        return None
    out = [f"table netdev {NFT_TABLE} {{"]
    for nic in cfg["nics"]:
        p0, p1 = nic["ports"]
        for src, dst in ((p0, p1), (p1, p0)):
            out += [f"  chain arpdup_{src} {{",
                    f'    type filter hook egress device "{src}" priority 0; policy accept;',
                    f"    ether type arp meta mark != {ARP_DUP_MARK:#x} meta mark set {ARP_DUP_MARK:#x} "
                    f'dup to "{dst}"',
                    "  }"]
    out.append("}")
    return "\n".join(out) + "\n"


def ra_hold_ruleset(cfg: dict) -> str | None:
    """A ToR's Router Advertisements dropped on their way out, and its aggs' on their way in, while the
    lab starts.

    An agg learns a ToR's link-local address only from the ToR's Router Advertisements, and opens the
    session (the ToRs are passive) the moment it learns it. FRR 8.4's bgpd resets every session that is not
    yet Established when, just after it starts, zebra sends it the interfaces a second time (a start and
    the BGP instance's registration each ask for them); the reset session then waits bgpd's fixed 1 s start
    timer. Held back until every bgpd has started, a ToR's address reaches each agg after that: the
    namespace runtime's deploy removes this table and solicits the advertisements
    (hpnlab.runtime.base.Runtime.open_fabric). The same holds on the ToR's side: a ToR that learnt its
    aggs' addresses before its second interface dump leaves its peers Idle on that 1 s timer, and when the
    timer fires in the instant an agg's connection is being accepted, the event it queues stops the session
    just Established (one session in about three 78-node starts). So the ToR hears its aggs'
    advertisements only once the deploy removes the ``in`` chain (``ra_listen_ruleset``), after every bgpd
    has started. Self-configuring nodes (container images) never hold them.
    """
    if cfg["role"] != "tor":
        return None
    return (f"table ip6 {RA_HOLD_TABLE} {{\n"
            "  chain out {\n"
            "    type filter hook output priority 0; policy accept;\n"
            "    icmpv6 type nd-router-advert drop\n"
            "  }\n"
            "  chain in {\n"
            "    type filter hook input priority 0; policy accept;\n"
            "    icmpv6 type nd-router-advert drop\n"
            "  }\n"
            "}\n")


def ra_listen_ruleset() -> str:
    """The ToR hears its aggs' Router Advertisements again (its own stay held)."""
    return f"delete chain ip6 {RA_HOLD_TABLE} in\n"


def ra_release_ruleset() -> str:
    return f"delete table ip6 {RA_HOLD_TABLE}\n"


def agent_module(cfg: dict, driver: str = "userspace") -> str | None:
    """The node's agent: the ToR agent, the userspace host agent (LACP, routes, ARP announcements), on a
    kernel bond the bond host agent (ARP announcements and the bonds' state only), and with FARE an
    agg's weight keeper."""
    if cfg["role"] == "host":
        return "hpnlab.node.agents.bondhost" if driver == "bond" else "hpnlab.node.agents.host"
    if cfg["role"] == "agg" and cfg.get("multipath"):
        return "hpnlab.node.agents.fare"  # FARE's weights: the agg keeps its link-bandwidth route-maps current
    return {"tor": "hpnlab.node.agents.tor"}.get(cfg["role"])


def agent_needs_frr(cfg: dict) -> bool:
    """Whether the node's agent talks to its FRR (an agg's FARE keeper pushes route-maps through vtysh) and so
    starts after all of it. The ToR and host agents start between zebra and bgpd (hpnlab.runtime.base's
    deploy): LACP aggregates and each ToR puts its hosts' /32s into table 10 while bgpd is not yet running,
    so bgpd, once it starts, announces each ToR's routes together in its first UPDATEs, packed by
    attributes, instead of one burst per host as each is learned (a route learned after the sessions are
    up reaches every agg and every other ToR alone)."""
    return cfg["role"] == "agg"


def burst_bytes(rate_kbit: int) -> int:
    """Bucket depth: 1 ms at the rate, never below two full frames (tbf drops a frame larger than its burst;
    a larger burst lets short bursts past the rate)."""
    return max(2 * MTU_FRAME, rate_kbit * 1000 // 8 // 1000)


def tbf_args(shape: dict) -> list[str]:
    return ["tbf", "rate", f"{shape['rate_kbit']}kbit", "burst", str(burst_bytes(shape["rate_kbit"])),
            "limit", str(shape["queue_bytes"])]


def tc_batch(cfg: dict) -> list[str]:
    """One ``tc -batch`` line per shaped interface of a node (replace: idempotent, also after impair); a
    switch with qos gets its queues on each instead (hpnlab.node.qos)."""
    out = []
    for i in cfg["interfaces"]:
        if not i.get("shape"):
            continue
        if qos.applies(cfg):
            out += qos.tc_lines(i["name"], i["shape"], cfg["qos"], burst_bytes(i["shape"]["rate_kbit"]), MTU_FRAME)
        else:
            out.append(" ".join(["qdisc", "replace", "dev", i["name"], "root", "handle", "1:", *tbf_args(i["shape"])]))
    return out


def bonding_available() -> bool:
    """Kernel bonding loaded or loadable (not on every kernel: this project's CI kernel has none)."""
    if Path("/sys/module/bonding").exists():
        return True
    return any(Path(f"/lib/modules/{os.uname().release}/kernel/drivers/net/bonding").glob("bonding.ko*"))


def host_driver(requested: str, bonding: bool) -> str:
    """auto -> the production-faithful 802.3ad bond where the kernel has it, else the userspace agent."""
    if requested == "auto":
        return "bond" if bonding else "userspace"
    return requested

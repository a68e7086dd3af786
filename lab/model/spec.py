"""The lab spec: one small YAML file, validated strictly so mistakes surface before any file is written."""

from __future__ import annotations

import copy
import ipaddress
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hpnlab.errors import SpecError
from hpnlab.model.paths import data_dir
from hpnlab.model.qos import QoS

VIRTUAL_MAC = "00:00:5e:00:01:01"
MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
NAME_RE = re.compile(r"[a-z][a-z0-9]{0,9}")  # always fullmatch: '$' would accept a trailing newline
NAME_RULE = ("must be 1-10 characters, lowercase letters and digits, starting with a letter "
             "(it prefixes namespaces and container names)")
EXAMPLES = data_dir("examples")
DEFAULT_SPEC = EXAMPLES / "default.yml"
TCP_RTO_MIN_MS = 200  # the kernel's TCP minimum retransmission timeout (TCP_RTO_MIN) where a spec sets none


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tier3(_Strict):
    """Optional core layer; cores are dual-plane like the aggs."""

    cores_per_plane: int = Field(1, ge=1, le=64, description="cores in each plane")
    oversubscription: float = Field(15.0, ge=1.0, le=64.0, description=(
        "the paper's agg-to-core ratio (15:1), kept for reference only: the lab links every agg of a plane to "
        "every core of that plane once, whatever this says"))


class ASN(_Strict):
    """Leaves get unique ASNs; a plane's aggs (and cores) share one, as in the paper's eBGP design."""

    tor_base: int = Field(65100, ge=1, le=4294967295, description="the first ToR's ASN; each ToR gets the next one")
    agg_base: int = Field(65000, ge=1, le=4294967295, description="plane 0's aggs (plane 1: agg_base + 1)")
    core_base: int = Field(64900, ge=1, le=4294967295, description="plane 0's cores (plane 1: core_base + 1)")


class Addressing(_Strict):
    """Where the lab's addresses come from."""

    hosts: str = Field("10.0.0.0/16", description="one /24 per dual-ToR set from this pool (gateway .1, hosts from .2)")
    loopbacks: str = Field("10.255.0.0/16", description="router loopbacks (BGP router IDs)")

    @field_validator("hosts", "loopbacks")
    @classmethod
    def _cidr(cls, v: str) -> str:
        try:
            net = ipaddress.IPv4Network(v, strict=True)
        except ValueError as e:
            raise ValueError(f"must be an IPv4 network in CIDR form like 10.0.0.0/16 ({e})") from None
        if net.prefixlen > 24:
            raise ValueError("must be /24 or larger (one /24 per dual-ToR set)")
        special = [what for what, bad in (
            ("0.0.0.0/8 ('this network')", net.overlaps(ipaddress.IPv4Network("0.0.0.0/8"))),
            ("loopback", net.overlaps(ipaddress.IPv4Network("127.0.0.0/8"))),
            ("link-local", net.overlaps(ipaddress.IPv4Network("169.254.0.0/16"))),
            ("multicast", net.overlaps(ipaddress.IPv4Network("224.0.0.0/4"))),
            ("reserved", net.overlaps(ipaddress.IPv4Network("240.0.0.0/4")))) if bad]
        if special:
            raise ValueError(f"must be a unicast pool outside {special[0]} space, e.g. 10.0.0.0/16")
        return v


class PortOffsets(_Strict):
    """Added to a ToR's port number in the LACP port ID, so the two ToRs of a set never present the same one."""

    a: int = Field(300, description="offset of the set's ToR a")
    b: int = Field(600, description="offset of the set's ToR b")


class LACP(_Strict):
    """What both ToRs of a set present to the host: one partner system, one key."""

    system_mac: str = Field(VIRTUAL_MAC, description="the actor system both ToRs of a set send (the paper's virtual MAC)")
    system_priority: int = Field(65535, ge=1, le=65535, description="LACP system priority")
    key: int = Field(1, ge=1, le=65535, description="the operational key both ToRs send")
    port_offsets: PortOffsets = PortOffsets()
    fast_rate: bool = Field(True, description="LACPDUs every second, 3 s timeout (false: every 30 s, 90 s)")

    @field_validator("system_mac")
    @classmethod
    def _mac(cls, v: str) -> str:
        v = v.lower()
        if not MAC_RE.fullmatch(v):
            raise ValueError("must be a MAC like 00:00:5e:00:01:01")
        if int(v[:2], 16) & 1:
            raise ValueError("must be a unicast MAC (first octet even)")
        if v == "00:00:00:00:00:00":
            raise ValueError("must not be all zeros (LACP reads that as 'no partner'); the paper's is 00:00:5e:00:01:01")
        return v

    @model_validator(mode="after")
    def _offsets(self) -> "LACP":
        a, b = self.port_offsets.a, self.port_offsets.b
        for side, off in (("a", a), ("b", b)):
            if not 256 < off <= 65535 - 256:
                raise ValueError(f"port_offsets.{side} must be > 256 and <= 65279 (got {off}): ToRs have < 256 ports")
        if abs(a - b) < 256:
            raise ValueError(f"port_offsets a={a} and b={b} must differ by >= 256 so port IDs never clash")
        return self


class BGP(_Strict):
    """eBGP timers on every session (unnumbered, one per fabric link)."""

    keepalive: int = Field(1, ge=1, le=60, description="seconds between keepalives")
    hold: int = Field(3, ge=3, le=180, description="seconds without a message before a session drops")
    update_delay: int = Field(10, ge=0, le=3600, description=(
        "seconds a starting bgpd waits at most for every peer's End-of-RIB before its first best-path run and "
        "updates (FRR update-delay; 0: off). Each router then installs each route once with all its paths "
        "instead of growing its ECMP one session at a time: on 140 nodes up -> verified 19 s -> 13 s, zebra "
        "and bgpd 15 -> 6 CPU-s. Only at bgpd's start (no fault restarts bgpd, so failover figures are the "
        "same); a router one of whose peers never comes up advertises nothing for this long"))

    @model_validator(mode="after")
    def _hold(self) -> "BGP":
        if self.hold < 3 * self.keepalive:
            raise ValueError(f"hold ({self.hold}) must be >= 3 x keepalive ({self.keepalive})")
        return self


class BFD(_Strict):
    """BFD on every BGP session (FRR bfdd)."""

    enabled: bool = Field(True, description="run bfdd and tie every session to a BFD peer")
    interval_ms: int = Field(100, ge=10, le=60000, description="transmit and receive interval")
    multiplier: int = Field(3, ge=2, le=255, description="missed packets before the session is down")


class HoldDown(_Strict):
    """A ToR that boots or gets its links back keeps its host ports out of the hosts' aggregates (LACP
    Synchronization off) until its FIB has a route to every other dual-ToR set of its rail; a ToR whose
    agent was stopped for longer than the hosts' detection (a hang that ends) keeps them out until its
    stale BGP routes were withdrawn and relearnt and it can deliver to every host again (it ARPs for them:
    their entries failed while it was stopped); at most ``max_s`` seconds (M-LAG "delay restore", BGP
    "update-delay" in spirit)."""

    enabled: bool = Field(False, description=(
        "hold a (re)booting ToR's host ports out until it has routes; off by default, as in the paper's "
        "design (hpnlab's addition, and results without it keep their meaning); on, a hung ToR that resumes "
        "costs no second outage (experiments/tor-hang-holddown.yml)"))
    max_s: float = Field(30.0, gt=0, le=600, description="the longest a ToR may hold its host ports down")


class MicroBFD(_Strict):
    """RFC 7130 micro-BFD: one BFD session per member link of each host NIC's LAG (UDP 6784); a member
    whose session is down leaves the aggregate, on the host and on the ToR."""

    enabled: bool = Field(False, description="run micro-BFD on every host port and ToR host port")
    interval_ms: int = Field(100, ge=10, le=10000, description="transmit and receive interval")
    multiplier: int = Field(3, ge=2, le=255, description="missed packets before the member leaves the aggregate")


class Mechanisms(_Strict):
    """Each switch turns one non-stacked dual-ToR mechanism off, for ablations."""

    lacp: bool = Field(True, description="LACP between hosts and ToRs (false: static ECMP over both ports)")
    arp_proxy: bool = Field(True, description="the ToR answers every host ARP with its own MAC (no L2 flooding)")
    host_routes: bool = Field(True, description="ARP-learned /32s advertised in BGP (false: only the set's /24)")
    arp_duplication: bool = Field(True, description="every ARP a host sends leaves both its ports")


class LinkClass(_Strict):
    """Capacity of one class of links, applied on both ends (tc tbf: a rate and a byte-limited queue)."""

    rate_mbit: float = Field(gt=0, le=100000, description="egress rate of each end, Mbit/s")
    queue_kb: int = Field(256, ge=4, le=65536, description="queue limit per end, KB (the tbf backlog cap)")


class LinkRate(_Strict):
    """One link running at another rate than its class (a bundle that lost a member), on both its ends."""

    node: str = Field(description="one end's node, e.g. s0r0a")
    iface: str = Field(description="that node's interface on the link (a ToR names its uplink after the agg: agg0-1)")
    rate_mbit: float = Field(gt=0, le=100000, description="the link's rate, Mbit/s, each way")
    queue_kb: int | None = Field(None, ge=4, le=65536, description=(
        "the link's queue per end, KB (default: its class's). A bundle that lost members keeps each remaining "
        "member's buffer, so its queue in time stays the healthy link's: scale it with the rate (a class's 256 KB "
        "at a quarter of the rate: 64). Left at the class's, the queue lasts as many times longer as the rate is "
        "lower (256 KB at 5 Mbit/s: 420 ms, beyond BFD's 300 ms detection), and BFD's packets wait in it"))


class Links(_Strict):
    """Link capacity per class, scaled down from the paper's 200 Gbit/s access and 400 Gbit/s fabric.
    A class left out is unshaped (a veth runs at whatever the CPU gives it: nothing ever queues)."""

    access: LinkClass | None = Field(None, description="host-ToR links")
    uplink: LinkClass | None = Field(None, description="ToR-agg links")
    core: LinkClass | None = Field(None, description="agg-core links")
    per_link: list[LinkRate] = Field([], description=(
        "links at another rate than their class, e.g. [{node: s0r0a, iface: agg0-1, rate_mbit: 10}] (the queue "
        "stays the class's unless the entry gives queue_kb)"))
    offloads: bool = Field(False, description=(
        "false: every interface sends MTU-sized packets (GSO capped at one segment), so loss, one-way faults and "
        "queue limits act on each frame as on a switch; true: the kernel's TCP segmentation offload, ~64 KB "
        "per packet (several times the throughput of an unshaped link, but a dropped packet is ~45 frames)"))


class Multipath(_Strict):
    """How a switch spreads a destination over its equal-cost next hops. ``ecmp``: equal shares by hash.
    ``fare`` (the FARE draft): each ToR weighs a path L1->agg->L2 by min(capacity L1-agg, capacity agg-L2),
    carried as the BGP link-bandwidth extended community that each agg sets per destination ToR and that
    bgpd turns into kernel nexthop weights; the aggs re-weigh when a link's capacity changes.
    ``fare-adaptive``: the same with the available capacity (capacity minus the load each agg measures on
    its links), recomputed every ``interval_s``.
    ``spray``: every packet a ToR forwards from its hosts takes the next of its equal-cost next hops in turn
    (nftables numgen marks, one routing table per next hop that the ToR's agent keeps in step with what
    bgpd installs); the receiver sees reordering, which the hosts' ``tcp_reordering`` lets TCP absorb.
    ``spray-weighted``: spraying in proportion to FARE's weights: the aggs advertise FARE's capacities as in
    ``fare``, and each ToR gives a destination's uplinks its packets in the shares of the nexthop weights
    bgpd installed for it (one numgen map per destination prefix, rewritten when the weights change).
    ``flowlet``: a ToR picks the next uplink in turn per flowlet: a flow's packets stay on one uplink while
    they follow each other closer than ``flowlet_gap_ms`` (nftables sets with that timeout, refreshed by
    every packet), and a gap longer than that lets the next packet take another.
    ``dlb``: per packet, in shares that follow each uplink's measured queue: every ``dlb_interval_ms`` the
    ToR's agent reads its uplinks' backlogs (the tbf's, rtnetlink) and gives each uplink a share of
    capacity x (1 - backlog / queue limit), rewriting the numgen map (AIPod's dynamic load balancing in the
    ToR's software)."""

    mode: Literal["ecmp", "fare", "fare-adaptive", "spray", "spray-weighted", "flowlet", "dlb"] = Field(
        "ecmp", description="ecmp, fare, fare-adaptive, spray, spray-weighted, flowlet or dlb (above)")
    flowlet_gap_ms: float = Field(4.0, ge=1, le=10000, description=(
        "flowlet: the idle gap that ends a flowlet, ms at the lab's rates (the kernel counts set timeouts in "
        "jiffies: 4 ms at HZ=250); a gap is a queueing-delay difference, and delays scale with 1/link rate, so "
        "a production gap of g us at 400 Gbit/s is g x 400000 / uplink rate_mbit us here"))
    dlb_interval_ms: int = Field(50, ge=5, le=10000, description=(
        "dlb: how often each ToR's agent reads its uplinks' queues (and rewrites the shares when one moved by "
        "2 of its 20 slots or more: each rewrite is an nft process, ~10 ms of a core)"))
    interval_s: float = Field(1.0, ge=0.2, le=60, description=(
        "how often each agg reads its links' capacity (and, fare-adaptive, their load) and re-weighs"))


SPRAY_MODES = ("spray", "spray-weighted", "flowlet", "dlb")  # a ToR chooses a path per packet (or flowlet)
FARE_MODES = ("fare", "fare-adaptive", "spray-weighted")  # the modes whose aggs advertise FARE's bandwidths


class Hash(_Strict):
    """The switches' ECMP hash. ``shared``: every switch hashes alike (one ASIC model, one seed: the
    polarising case); ``per-switch``: a different seed per switch; a number: that seed on every switch.
    Hosts (NICs, not switch ASICs) always hash with their own seed."""

    policy: Literal["l3", "l4"] = Field("l4", description="l4: the 5-tuple; l3: source and destination address only")
    seed: str | int = Field("shared", description="shared, per-switch, or a number 1..4294967295 (above)")

    @field_validator("seed", mode="before")
    @classmethod
    def _seed(cls, v):
        ok = v in ("shared", "per-switch") or (type(v) is int and 1 <= v <= 0xFFFFFFFF)
        if not ok:
            raise ValueError("must be 'shared', 'per-switch' or a number 1..4294967295 (0 would let the kernel "
                             "pick one at random)")
        return v


class Spec(_Strict):
    """A lab: the fabric's sizes, its design choices, and the mechanisms' settings."""

    # required: it prefixes everything the lab creates, so it is never guessed
    name: str = Field(description="the lab's name: 1-10 lowercase letters and digits, prefixes everything it creates")
    segments: int = Field(2, ge=1, le=64, description="segments (tier 1: the hosts under one group of dual-ToR sets)")
    hosts_per_segment: int = Field(2, ge=1, le=128, description="hosts in each segment (the paper: 128)")
    rails: int = Field(2, ge=1, le=8, description="NICs per host, each on its own rail of ToRs (the paper: 8)")
    access: Literal["dual-tor", "single-tor", "stacked-dual-tor"] = Field("dual-tor", description=(
        "dual-tor: HPN's non-stacked pair; single-tor: one ToR, one cable; stacked-dual-tor: the M-LAG baseline"))
    tier2: Literal["dual-plane", "clos"] = Field("dual-plane", description=(
        "dual-plane: ToR a to plane-0 aggs only, ToR b to plane 1; clos: every ToR to every agg"))
    aggs_per_plane: int = Field(2, ge=1, le=128, description="aggs in each plane (the paper: 60)")
    tier3: Tier3 | None = Field(None, description="an optional core layer, dual-plane like the aggs")
    asn: ASN = ASN()
    addressing: Addressing = Addressing()
    lacp: LACP = LACP()
    bgp: BGP = BGP()
    bfd: BFD = BFD()
    mechanisms: Mechanisms = Mechanisms()
    links: Links = Links()
    hash: Hash = Hash()
    multipath: Multipath = Multipath()
    qos: QoS | None = Field(None, description=(
        "priority queues on every shaped switch port and the DSCP -> queue map (below); left out: one FIFO per port"))
    holddown: HoldDown = HoldDown()
    micro_bfd: MicroBFD = MicroBFD()
    host_driver: Literal["auto", "userspace", "bond"] = Field("auto", description=(
        "the hosts' NIC side: the kernel's 802.3ad bond (bond), hpnlab's userspace LACP agent (userspace), or "
        "the bond where the kernel has bonding (auto)"))
    tcp_rto_min_ms: int | None = Field(None, ge=1, le=120000, description=(
        "the hosts' TCP minimum retransmission timeout, ms (sysctl net.ipv4.tcp_rto_min_us; default: the "
        "kernel's 200 ms); a RoCE NIC's counterpart is its queue pairs' ACK timeout (NCCL_IB_TIMEOUT: 4.096 us "
        "x 2^18 = 1.07 s)"))
    tcp_reordering: int | None = Field(None, ge=3, le=300, description=(
        "the hosts' TCP reordering threshold, packets (sysctl net.ipv4.tcp_reordering; default: the kernel's "
        "3): how far out of order a segment may arrive before TCP takes it as lost, the hosts' reorder "
        "tolerance under multipath.mode spray (a RoCE NIC's counterpart: marking packets reorder-tolerant)"))

    time_dilation: int = Field(1, ge=1, le=50, description=(
        "k: every protocol timer runs k times slower (LACP's periods and timeouts, BFD's and micro-BFD's "
        "intervals, BGP keepalive and hold, the hosts' re-announcement, the ToRs' solicitation, the "
        "hold-down's bound, the kernel's neighbour timers on every lab interface, the hosts' TCP minimum RTO), for "
        "a lab whose machine cannot hold the production timers at 1:1; results record k and give each "
        "timer-driven figure divided by k (the fabric's time). Not dilated: the kernel's forwarding, carrier and "
        "ECMP rehash, TCP's maximum RTO (already the kernel's ceiling, 120 s), link rates, queueing, the agents' "
        "heartbeat. k > 1 needs the userspace "
        "host agent (the kernel bond's LACP timers are fixed): host_driver auto picks it"))

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.fullmatch(v):
            raise ValueError(NAME_RULE)
        return v

    @model_validator(mode="after")
    def _cross(self) -> "Spec":
        sets = self.segments * self.rails
        hosts = ipaddress.IPv4Network(self.addressing.hosts)
        have = 2 ** (24 - hosts.prefixlen)
        if sets > have:
            raise ValueError(f"addressing.hosts {hosts} holds {have} /24s but {sets} dual-ToR sets "
                             f"(segments x rails) need one each; use a larger pool")
        loops = ipaddress.IPv4Network(self.addressing.loopbacks)
        if self.router_count() > loops.num_addresses - 2:
            raise ValueError(f"addressing.loopbacks {loops} has too few addresses for {self.router_count()} routers")
        if hosts.overlaps(loops):
            raise ValueError("addressing.loopbacks must not overlap addressing.hosts")
        if self.tier2 == "dual-plane" and self.access == "single-tor":
            # A single ToR must reach both planes: that is a Clos, say so instead of guessing.
            raise ValueError("tier2 'dual-plane' needs access 'dual-tor' (ToR a -> plane 0, ToR b -> plane 1); "
                             "use tier2 'clos' with single-tor")
        if self.access == "stacked-dual-tor":
            if self.tier2 != "clos":
                # a stacked pair shares its host routes over the peer link; planes would split the pair
                raise ValueError("access 'stacked-dual-tor' (the paper's baseline) is modelled with tier2 'clos'; "
                                 "set tier2: clos")
            if not self.mechanisms.lacp:
                raise ValueError("access 'stacked-dual-tor' bundles each host's two links with LACP (M-LAG); "
                                 "mechanisms.lacp: false would leave single-homed hosts: keep it true")
        if self.time_dilation > 1 and self.host_driver == "bond":
            raise ValueError(f"time_dilation {self.time_dilation} needs LACP timers it can scale, and the kernel "
                             f"bond's are fixed (1 s / 30 s): set host_driver userspace (or auto)")
        if self.bfd.enabled and self.bfd.interval_ms * self.time_dilation > 60000:
            # FRR's bfdd takes transmit/receive-interval 10-60000 ms; a larger one fails its config line
            raise ValueError(f"time_dilation {self.time_dilation} x bfd.interval_ms {self.bfd.interval_ms} is "
                             f"{self.bfd.interval_ms * self.time_dilation} ms, past FRR's BFD bound of 60000 ms: "
                             f"lower one of them")
        if self.multipath.mode != "ecmp":
            self._check_fare()
        links = self.links
        if self.qos is not None and not (links.access or links.uplink or links.core or links.per_link):
            # an unshaped veth sends at whatever the CPU gives it: nothing ever waits in a queue to be ordered
            raise ValueError("qos needs shaped links to queue on: give links.uplink (or access, core), "
                             "e.g. {rate_mbit: 20}")
        asns = [(self.asn.tor_base, self.asn.tor_base + self.tor_count() - 1),
                (self.asn.agg_base, self.asn.agg_base + 1), (self.asn.core_base, self.asn.core_base + 1)]
        if asns[0][1] > 4294967295:
            raise ValueError("asn.tor_base + number of ToRs exceeds 4294967295")
        for i, (lo1, hi1) in enumerate(asns):
            for lo2, hi2 in asns[i + 1:]:
                if lo1 <= hi2 and lo2 <= hi1:
                    raise ValueError("asn ranges overlap: ToRs use tor_base..tor_base+#ToRs-1, "
                                     "aggs agg_base..agg_base+1, cores core_base..core_base+1")
        return self

    def _check_fare(self) -> None:
        mode = self.multipath.mode
        if mode in SPRAY_MODES:
            self._check_spray()
        if mode not in FARE_MODES:
            return
        if self.tier3 is not None:
            raise ValueError(f"multipath.mode '{mode}' weighs two-tier paths (ToR-agg-ToR); remove tier3 or use "
                             f"mode ecmp")
        if self.links.uplink is None:
            raise ValueError(f"multipath.mode '{mode}' weighs each path by its links' capacity: give "
                             f"links.uplink, e.g. {{rate_mbit: 20}}")
        # FRR 8.4 carries link bandwidth in whole Mbit/s, 1..25600 ('set extcommunity bandwidth'); a
        # per_link rate is checked where its link's kind is known (render.per_link_rates)
        rate = self.links.uplink.rate_mbit
        if not 1 <= rate <= 25600:
            raise ValueError(f"links.uplink.rate_mbit {rate:g}: with multipath.mode '{mode}' uplink rates are "
                             f"carried in BGP as 1..25600 Mbit/s (FRR 8.4); scale the lab's rates into that range")

    def _check_spray(self) -> None:
        mode = self.multipath.mode
        if self.tier3 is not None:
            # the ToRs spray over their uplinks; with cores the aggs would hash again, half a spray
            raise ValueError(f"multipath.mode '{mode}' sprays a ToR's packets over its aggs (two tiers); remove "
                             f"tier3 or use mode ecmp")
        if self.links.offloads:
            # with offloads a packet is a ~64 KB GSO skb: the spray would move ~45 frames at a time
            raise ValueError(f"links.offloads true: multipath.mode '{mode}' chooses a path per packet, which "
                             f"must be an MTU frame; set links.offloads false")

    def dilated(self) -> "Spec":
        """The timers FRR and the agents run: each protocol timer times ``time_dilation`` (this spec when it is
        1). ``time_dilation`` is kept, so a reader knows the figures' factor; render calls this once."""
        k = self.time_dilation
        if k == 1:
            return self
        return self.model_copy(update={
            "bgp": self.bgp.model_copy(update={"keepalive": self.bgp.keepalive * k, "hold": self.bgp.hold * k}),
            "bfd": self.bfd.model_copy(update={"interval_ms": self.bfd.interval_ms * k}),
            "micro_bfd": self.micro_bfd.model_copy(update={"interval_ms": self.micro_bfd.interval_ms * k}),
            "holddown": self.holddown.model_copy(update={"max_s": self.holddown.max_s * k}),
            "tcp_rto_min_ms": self.tcp_rto_min_ms * k if self.tcp_rto_min_ms else None})

    def host_rto_min_ms(self) -> int | None:
        """The hosts' TCP minimum RTO a dilated lab runs: k x the spec's (or the kernel's 200 ms), carried on
        every route the host agent installs (a locked ``rto_min`` route metric: on every kernel, where
        net.ipv4.tcp_rto_min_us is 6.11+); None at k = 1 (the kernel's, or the spec's sysctl)."""
        k = self.time_dilation
        return (self.tcp_rto_min_ms or TCP_RTO_MIN_MS) * k if k > 1 else None

    # Derived sizes (pure, used by validation and the topology builder).
    @property
    def planes(self) -> int:
        return 2 if self.tier2 == "dual-plane" else 1

    @property
    def tors_per_set(self) -> int:
        return 1 if self.access == "single-tor" else 2

    @property
    def stacked(self) -> bool:
        return self.access == "stacked-dual-tor"

    def tor_count(self) -> int:
        return self.segments * self.rails * self.tors_per_set

    def agg_count(self) -> int:
        return self.aggs_per_plane * self.planes

    def core_count(self) -> int:
        return self.tier3.cores_per_plane * self.planes if self.tier3 else 0

    def router_count(self) -> int:
        return self.tor_count() + self.agg_count() + self.core_count()


def check_lab_name(name: str, field: str = "lab name") -> str:
    """A lab name wherever it enters (spec, --lab, the API): never a path, never a shell word."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise SpecError(f"{field} {_short(name)}: {NAME_RULE}")
    return name


def _field_path(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "spec"


def _short(value: Any, limit: int = 40) -> str:
    """A user's value as shown in an error: repr'd (so control characters are visible), never long."""
    r = repr(value)
    return r if len(r) <= limit else r[:limit] + f"... ({len(r)} characters)"


def _format_error(err: ValidationError) -> str:
    e = err.errors(include_url=False)[0]
    field = _field_path(e["loc"])
    kind = e["type"]
    if kind == "extra_forbidden":
        return f"spec field '{field}': unknown key; remove it or check spelling (see examples/default.yml)"
    msg = e["msg"].removeprefix("Value error, ")
    if kind in ("model_type", "dict_type", "model_attributes_type"):  # not pydantic's class names
        msg = "must be a mapping of its own keys (e.g. 'enabled: true' under it)"
    got = e.get("input")
    if kind in ("missing",):
        hint = ", e.g. name: hpn (it prefixes the lab's namespaces)" if field == "name" else ""
        return f"spec field '{field}': required{hint}"
    shown = "" if isinstance(got, (dict, list)) or got is None else f" (got {_short(got)})"
    if field == "spec":  # a check across fields: its message starts with the field it is about
        m = re.match(r"([a-z0-9_]+(?:\.[a-z0-9_]+)*) ", msg)
        if m and m.group(1).split(".")[0] in Spec.model_fields:
            field, msg = m.group(1), msg[m.end():]
    return f"spec field '{field}': {msg}{shown}"


def parse_spec(data: Any, source: str = "spec") -> Spec:
    if data is None:
        raise SpecError(f"{source}: the spec is empty; start from examples/default.yml (name: is required)")
    if not isinstance(data, dict):
        raise SpecError(f"{source}: top level must be a mapping of keys like 'name:' and 'segments:'")
    try:
        return Spec.model_validate(data)
    except ValidationError as err:
        raise SpecError(f"{source}: {_format_error(err)}") from None


def find_spec(path: str | Path | None) -> Path:
    """A spec file: the path given, or a shipped example by name ('clos', 'segment.yml'); default: default.yml."""
    if not path:
        return DEFAULT_SPEC
    p = Path(path)
    try:
        if p.exists():
            return p
    except OSError:  # ENAMETOOLONG, ELOOP...: read_yaml says so in one line
        return p
    if len(str(path)) < 256:
        # 'examples/default.yml' (the README's form) resolves outside the checkout too
        name = p.name if p.parent.name == "examples" else str(path)
        for cand in (EXAMPLES / name, EXAMPLES / f"{name}.yml"):
            if cand.is_file():
                return cand
    return p


class DuplicateKey(Exception):
    def __init__(self, key: Any, line: int):
        super().__init__(key)
        self.key, self.line = key, line


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys silently; a spec or experiment file must not."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep)


MAX_FILE = 1 << 20  # a spec or experiment file is a few KB; anything past 1 MiB is refused unread
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def read_yaml(p: Path, what: str) -> Any:
    """A YAML file a user named, read defensively: a regular file under MAX_FILE, UTF-8 text without
    control characters, parsed without a traceback. Every problem is one SpecError line."""
    shown = str(p) if len(str(p)) <= 120 else str(p)[:120] + "..."
    try:
        st = os.stat(p)
        if stat.S_ISDIR(st.st_mode):
            raise SpecError(f"{what} '{shown}' is a directory; give a YAML file")
        if not stat.S_ISREG(st.st_mode):
            raise SpecError(f"{what} '{shown}' is not a regular file (a device, FIFO or socket); give a YAML file")
        if st.st_size > MAX_FILE:
            raise SpecError(f"{what} '{shown}' is {st.st_size} bytes; a spec is a few KB (limit {MAX_FILE})")
        with open(p, "rb") as f:
            raw = f.read(MAX_FILE + 1)
    except FileNotFoundError:
        raise SpecError(f"{what} '{shown}' not found; give a path to a YAML file") from None
    except OSError as e:
        raise SpecError(f"{what} '{shown}' cannot be read: {e.strerror or e.__class__.__name__}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"{what} '{shown}' is not UTF-8 text (byte {e.start}); give a YAML file") from None
    m = CONTROL.search(text)
    if m:
        line = text.count("\n", 0, m.start()) + 1
        raise SpecError(f"{what} '{shown}': control character {m.group()!r} at line {line}; a spec is plain text")
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except DuplicateKey as e:
        raise SpecError(f"{shown}: key '{e.key}' given twice (line {e.line}); keep one") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = str(getattr(e, "problem", None) or e).splitlines()[0]
        raise SpecError(f"{shown}: malformed YAML{where}: {problem}") from None
    except RecursionError:
        raise SpecError(f"{shown}: malformed YAML: nested too deeply") from None
    except (ValueError, TypeError) as e:  # e.g. '!!int abc': the YAML tag's own conversion fails
        raise SpecError(f"{shown}: malformed YAML: a tagged value cannot be converted ({_short(str(e), 60)})") from None


# A JSON mapping merged into every spec file hpnlab reads (lab specs and experiments' base specs; a
# variant's own overrides still come after it). For a machine too slow for a spec's timers as written, e.g.
# the test VMs under software emulation: '{"bfd": {"interval_ms": 1000}}'. The spec in force, overrides
# merged, is what every lab and results.json records.
ENV_OVERRIDES = "HPNLAB_SPEC_OVERRIDES"


def env_overrides() -> dict:
    """``HPNLAB_SPEC_OVERRIDES`` parsed ({} when unset or empty); SpecError naming it when it is no JSON mapping."""
    raw = os.environ.get(ENV_OVERRIDES, "").strip()
    if not raw:
        return {}
    try:
        over = json.loads(raw)
    except ValueError as e:
        raise SpecError(f"{ENV_OVERRIDES}: not JSON ({_short(str(e), 60)}); give a mapping such as "
                        f"'{{\"bfd\": {{\"interval_ms\": 1000}}}}', or unset it") from None
    if not isinstance(over, dict):
        raise SpecError(f"{ENV_OVERRIDES}: give a JSON mapping of spec fields (an object), not {type(over).__name__}")
    return over


def with_env_overrides(data: Any, where: str) -> tuple[Any, str]:
    """A spec file's data with ``HPNLAB_SPEC_OVERRIDES`` merged in, and its name saying so."""
    over = env_overrides()
    if not over:
        return data, where
    return merge(data, over), f"{where} + {ENV_OVERRIDES}"


def load_spec_data(path: str | Path | None = None) -> tuple[Any, str]:
    """The YAML of a spec file, unvalidated (for merging overrides), with ``HPNLAB_SPEC_OVERRIDES`` merged
    in, and the name to report it by."""
    p = find_spec(path)
    return with_env_overrides(read_yaml(p, "spec file"), str(p))


def merge(base: Any, over: dict) -> dict:
    """``over`` merged into ``base`` key by key (nested mappings merged, everything else replaced)."""
    out = copy.deepcopy(base) if isinstance(base, dict) else {}
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def load_spec(path: str | Path | None = None) -> Spec:
    data, where = load_spec_data(path)
    return parse_spec(data, where)

"""Health checks of a running lab, through the runtime interface only (works on every runtime).

Each check is {"name", "ok", "detail"}. Stages run in order and stop at the first failing stage,
so polling a lab that is still converging stays cheap.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

from hpnlab.lifecycle import fare
from hpnlab.machine import vty
from hpnlab.model import netdefaults, qos
from hpnlab.errors import RuntimeFailure
from hpnlab.model.models import NodeConfig
from hpnlab.node import nsenter, rtnl
from hpnlab.node.programs import reach
from hpnlab.runtime.base import Runtime

HEARTBEAT_MAX_AGE = 3.0
VTYSH_TIMEOUT = 5.0  # a hung router is a FAIL row, not an aborted verify


def pmap(fn, items, workers: int = 8) -> list:
    """``fn`` over ``items`` on a thread pool. On an exception or Ctrl-C the pending calls are cancelled
    and nothing waits for the running ones (the rollback kills what they run): leaving a pool's ``with``
    block instead waited for every prober, minutes on the paper's segment."""
    ex = ThreadPoolExecutor(max_workers=workers)
    try:
        return list(ex.map(fn, items))
    finally:
        ex.shutdown(wait=False, cancel_futures=True)


def _check(name: str, ok: bool, detail: str) -> dict:
    return {"name": name, "ok": bool(ok), "detail": detail}


def read_status(rt: Runtime, node: str) -> dict | None:
    return rt.read_status(node)


def bonded(rt: Runtime, cfg: NodeConfig) -> bool:
    return cfg.role == "host" and rt.state.data.host_driver == "bond"


def check_config(rt: Runtime, cfgs: dict[str, NodeConfig]) -> list[dict]:
    """What the spec's 'hash', 'links' and 'multipath' say, read back from each node's kernel: its multipath
    hash policy and seed, a tbf with the spec's rate and queue on every shaped interface, and with FARE the
    nexthop weights each ToR uses against what FARE prescribes for the capacities in force (hpnlab.lifecycle.fare)."""
    # Keys this kernel lacks were left out of the plan (hpnlab.machine.kernel; the lab's notes say what that costs).
    keys = [k for k in ("net.ipv4.fib_multipath_hash_policy", "net.ipv4.fib_multipath_hash_seed",
                        "net.ipv4.fib_multipath_hash_fields") if k not in set(rt.state.data.skip_sysctls)]
    keys += list(netdefaults.HOST_TCP_BUFFERS)  # hosts' own, not the root namespace's (hpnlab.model.netdefaults)

    rates = fare.agg_rates(rt, cfgs) if fare.enabled(cfgs) else None

    def one(item) -> dict:
        n, c = item
        problems = []
        if rates is not None and c.role == "tor":
            problems += fare.problems(fare.weights(rt, cfgs, n, rates))
        mine = [k for k in keys if k in c.sysctls]  # hosts keep the kernel's default hash fields
        path = rt.netns_path(n)
        if path is not None:  # read by a thread inside the node's namespace: no process per node and poll
            have = nsenter.read_sysctls(path, mine)
        else:  # one line per key; a vector's fields are tab-separated
            have = rt.run(n, ["sysctl", "-n", *mine], check=False, timeout=10).stdout.splitlines()
        have = [netdefaults.normalise(v) for v in have]
        want = [netdefaults.normalise(c.sysctls[k]) for k in mine]
        have += ["?"] * (len(want) - len(have))
        bad = [(k, h, w) for k, h, w in zip(mine, have, want) if h != w]
        if bad:
            problems.append("sysctls " + "; ".join(f"{k} is '{h}', the plan says '{w}'" for k, h, w in bad))
        shaped = {i.name: i.shape for i in c.interfaces if i.shape}
        if shaped:
            r = rt.run(n, ["tc", "-j", "qdisc", "show"], check=False, timeout=10)
            try:
                qd = {q["dev"]: q for q in json.loads(r.stdout or "[]") if q.get("root")}
            except ValueError:
                qd = {}
            if qos.applies(c.plain()):
                every = json.loads(r.stdout or "[]") if qd else []
                for ifc, sh in shaped.items():
                    problems += qos.port_problems(ifc, sh, c.qos, [q for q in every if q.get("dev") == ifc])
                shaped_tbf = {}
            else:
                shaped_tbf = shaped
            for ifc, sh in shaped_tbf.items():
                q = qd.get(ifc, {})
                opts = q.get("options", {})
                # tc -j prints the rate in bytes/s and the queue as latency (us): limit = rate x lat + burst
                rate = opts.get("rate", 0)
                # (at high rates tc prints the limit itself)
                limit = opts["limit"] if "limit" in opts else rate * opts.get("lat", 0) / 1e6 + opts.get("burst", 0)
                if q.get("kind") != "tbf" or round(rate * 8 / 1000) != sh["rate_kbit"] \
                        or abs(limit - sh["queue_bytes"]) > 0.02 * sh["queue_bytes"] + 64:
                    problems.append(f"{ifc}: {q.get('kind', 'no')} qdisc, spec says tbf {sh['rate_kbit']} kbit/s "
                                    f"limit {sh['queue_bytes']} B")
        seed = dict(zip(mine, have)).get("net.ipv4.fib_multipath_hash_seed")
        detail = "; ".join(problems[:3]) or ((f"hash seed {seed}" if seed else "hash seed: the kernel's own key")
                                             + (f", {len(shaped)} links shaped" if shaped else "")
                                             + (", FARE weights as prescribed" if rates is not None
                                                and c.role == "tor" else ""))
        return _check(f"config {n}", not problems, detail)

    return pmap(one, cfgs.items())


def check_agents(rt: Runtime, cfgs: dict[str, NodeConfig], statuses: dict[str, dict | None] | None = None) -> list[dict]:
    """``statuses``: node -> its status as the caller already read it (else read here)."""
    out = []
    for n, c in cfgs.items():
        if c.role not in ("tor", "host") and not c.multipath:  # nodes without an agent
            continue
        st = statuses[n] if statuses is not None and n in statuses else read_status(rt, n)
        alive, what = rt.agent_alive(n)
        if not alive:
            out.append(_check(f"agent {n}", False, f"{what} (see {rt.agent_log(n)})"))
        elif st is None or st["age"] > HEARTBEAT_MAX_AGE:
            age = "never" if st is None else f"{st['age']:.1f} s ago"
            out.append(_check(f"agent {n}", False, f"no heartbeat (last {age})"))
        elif (st.get("stack") or {}).get("shut") or (st.get("stack") and not st["stack"]["sync_ok"]):
            sk = st["stack"]
            out.append(_check(f"agent {n}", False, f"stacked {sk['role']}: " + (
                "host ports shut (peer alive out of band, sync lost)" if sk["shut"] else
                f"no sync from the peer for {sk['sync_age']:g} s")))
        elif (st.get("holddown") or {}).get("held"):
            hd = st["holddown"]
            out.append(_check(f"agent {n}", False, f"host ports held down for {hd['held_for']:g} s (bound "
                                                   f"{hd['bound_s']:g} s): no route yet to {', '.join(hd['missing'])}"))
        else:
            out.append(_check(f"agent {n}", True, f"{what}, heartbeat {st['age']:.1f} s ago"))
    return out


def check_lacp(rt: Runtime, cfgs: dict[str, NodeConfig]) -> list[dict]:
    out = []
    for n, c in cfgs.items():
        if c.role != "host" or not c.mechanisms["lacp"]:
            continue
        if bonded(rt, c):
            out.append(check_bond(rt, n, c))
            continue
        st = read_status(rt, n) or {"nics": []}
        problems, parts = [], []
        for nic in st["nics"]:
            partners = set()
            for p in nic["ports"]:
                pr = p["partner"]
                if p["mux"] != "collecting_distributing" or pr is None:
                    problems.append(f"{p['iface']} {p['mux']} (rx {p['rx']})")
                    continue
                if (c.micro_bfd or {}).get("enabled") and (p.get("micro_bfd") or {}).get("state") != "up":
                    problems.append(f"{p['iface']} micro-BFD {(p.get('micro_bfd') or {}).get('state', 'not running')}")
                    continue
                partners.add((pr["system"], pr["key"]))
                parts.append(f"{p['iface']}->{pr['system']}/k{pr['key']}/p{pr['port']}")
            ports = [p["partner"]["port"] for p in nic["ports"] if p["partner"]]
            if len(partners) > 1:
                problems.append(f"rail {nic['rail']}: two partner systems {sorted(partners)}")
            if len(ports) == 2 and ports[0] == ports[1]:
                problems.append(f"rail {nic['rail']}: both ToRs present port {ports[0]}")
        out.append(_check(f"lacp {n}", not problems and bool(parts), "; ".join(problems) or " ".join(parts)))
    return out


def check_bond(rt: Runtime, node: str, cfg: NodeConfig) -> dict:
    """Kernel 802.3ad host: both slaves in one aggregator whose partner is the shared virtual system."""
    from hpnlab.machine.nodesetup import bond_name, parse_bonding

    problems, parts = [], []
    for nic in cfg.nics:
        b = bond_name(nic.rail)
        slaves = parse_bonding(rt.run(node, ["cat", f"/proc/net/bonding/{b}"], check=False).stdout)
        aggs = {s.get("aggregator") for s in slaves}
        systems = {s.get("partner_system") for s in slaves}
        ports = [s.get("partner_port") for s in slaves]
        if len(slaves) != 2 or len(aggs) != 1 or len(systems) != 1 or len(set(ports)) != 2 \
                or "00:00:00:00:00:00" in systems:
            problems.append(f"{b}: slaves {slaves}")
        else:
            parts.append(f"{b}->{systems.pop()} ports {ports}")
    return _check(f"lacp {node}", not problems, "; ".join(problems) or " ".join(parts))


class PollMemo:
    """What a poll loop keeps between its polls, never used for a final verdict: the BGP check of each router
    whose sessions were all Established, and one inet_diag socket per router, opened in its namespace once
    (a poll then costs a dump per router, no namespace switch and no socket)."""

    def __init__(self) -> None:
        self.bgp: dict[str, dict] = {}
        self.diag: dict[str, socket.socket] = {}

    def close(self) -> None:
        for s in self.diag.values():
            s.close()
        self.diag.clear()


def bgp_connections(rt: Runtime, node: str, memo: PollMemo | None = None) -> int | None:
    """The router's established TCP connections on BGP's port, counted in its namespace by this process;
    None where the node cannot be entered from here. A session is Established only over such a connection,
    so while there are fewer than the router has sessions, BGP is not up and bgpd need not be asked."""
    sock = memo.diag.get(node) if memo is not None else None
    try:
        if sock is None:
            path = rt.netns_path(node)
            if path is None:
                return None
            with nsenter.entered(path):
                sock = rtnl.diag_socket()
            if memo is not None:
                memo.diag[node] = sock
        try:
            return rtnl.tcp_established(179, sock)
        finally:
            if memo is None:
                sock.close()
    except OSError:
        if memo is not None and memo.diag.pop(node, None) is not None:
            sock.close()
        return None


def check_bgp(rt: Runtime, cfgs: dict[str, NodeConfig], memo: PollMemo | None = None) -> list[dict]:
    """Every router's sessions Established, as bgpd says. ``memo`` (a poll loop's): a router whose sessions
    were all Established in an earlier poll and still have their TCP connections is not asked again."""
    routers = [n for n, c in cfgs.items() if c.role != "host"]

    def one(n: str) -> dict:
        want = len(cfgs[n].fabric_ifaces)
        tcp = bgp_connections(rt, n, memo)
        if tcp is not None and tcp < want:  # not all up yet: said without asking bgpd
            if memo is not None:
                memo.bgp.pop(n, None)
            return _check(f"bgp {n}", False, f"{tcp}/{want} sessions connected (TCP; BGP state not asked yet)")
        if memo is not None and tcp is not None and n in memo.bgp:
            return memo.bgp[n]
        res = ask_bgp(rt, n, want)
        if memo is not None and res["ok"]:
            memo.bgp[n] = res
        return res

    return pmap(one, routers)


def ask_bgp(rt: Runtime, n: str, want: int, timeout: float = VTYSH_TIMEOUT) -> dict:
    """The router's BGP check as bgpd says it (its vty socket where this machine reaches it, else vtysh)."""
    data = rt.daemon_json(n, "bgpd", "show bgp summary json", timeout=timeout)
    if not isinstance(data, dict):
        sock = rt.vty_socket(n, "bgpd")
        if sock is not None and not vty.listening(sock):
            return _check(f"bgp {n}", False, f"bgpd not running (nothing listens on {sock})")
        return _check(f"bgp {n}", False, f"bgpd not answering (within {timeout:g} s)")
    peers = (data.get("ipv4Unicast") or {}).get("peers", {})
    up = sum(1 for p in peers.values() if p.get("state") == "Established")
    return _check(f"bgp {n}", up == want, f"{up}/{want} sessions established")


def expected_prefixes(cfgs: dict[str, NodeConfig]) -> set[str]:
    """Every set subnet and (with host routes on) every host /32: each set has one ToR in each plane,
    so in dual-plane and Clos alike every agg and core must know them all. Without ARP duplication
    only the ToR that saw a host's ARP has its /32, so /32s are not required then (that is the ablation)."""
    want = {c.subnet for c in cfgs.values() if c.role == "tor"}
    for c in cfgs.values():
        if c.role == "host" and c.mechanisms["host_routes"] and c.mechanisms["arp_duplication"]:
            want |= {f"{nic.ip}/32" for nic in c.nics}
    return want


def kernel_routes(rt: Runtime, node: str) -> set[str]:
    """The node's usable IPv4 unicast routes (main table, not linkdown), a /32 written a.b.c.d/32."""
    path = rt.netns_path(node)
    if path is not None:  # one netlink dump from a socket inside the node's namespace
        sock = nsenter.netlink_socket(path)
        try:
            return rtnl.usable_routes(254, sock)
        except OSError:
            return set()
        finally:
            sock.close()
    r = rt.run(node, ["ip", "-4", "-j", "route", "show"], check=False)
    try:
        routes = json.loads(r.stdout or "[]")
    except ValueError:
        return set()
    out = set()
    for rt_ in routes:
        dst = rt_.get("dst", "")
        if rt_.get("type", "unicast") != "unicast" or "linkdown" in rt_.get("flags", []):
            continue
        out.add(dst if "/" in dst else f"{dst}/32")
    return out


def check_routes(rt: Runtime, cfgs: dict[str, NodeConfig]) -> list[dict]:
    out = []
    want = expected_prefixes(cfgs)
    for n, c in cfgs.items():
        if c.role not in ("agg", "core"):
            continue
        have = kernel_routes(rt, n)
        missing = sorted(want - have, key=lambda p: ipaddress.ip_network(p))
        out.append(_check(f"routes {n}", not missing,
                          f"{len(want) - len(missing)}/{len(want)} host /32s and set subnets"
                          + (f"; missing {', '.join(missing[:4])}" + (" ..." if len(missing) > 4 else "")
                             if missing else "")))
    return out


# Up to this many hosts on a rail every ordered pair is pinged; beyond, each host pings the next host of its
# set and one host of every other set (reach_pairs), so a round's echoes grow with hosts x sets, not hosts^2.
REACH_ALL_PAIRS_MAX = 16


def reach_pairs(hosts: list[NodeConfig], arp_proxy: bool = True) -> dict[str, list[tuple[int, str, str]]]:
    """Per source host, the (rail, src, dst) echoes a reachability round sends.

    A rail of at most REACH_ALL_PAIRS_MAX hosts: every ordered pair. A larger rail: every host is a source
    and a destination through each kind of path its rail has, with a bounded number of echoes each:
    - the next host of its own set (the hosts behind one ToR pair, in config order, as a ring): the ToR's
      host route and ARP proxy, host to host through one ToR;
    - in every other set of the rail, the host at its own position (modulo that set's size): through
      the aggs (and cores) between the two sets' ToRs.
    On the paper's segment (one set per rail, 128 hosts) that is 128 echoes a rail instead of 16,256: the
    all-pairs round cost ~3.8 s of the segment's bring-up and added no path (every pair crossed the same
    two ToRs). Without the ARP proxy same-subnet pairs cannot talk and are left out."""
    out: dict[str, list[tuple[int, str, str]]] = {}
    rails = sorted({nic.rail for h in hosts for nic in h.nics})
    for rail in rails:
        on = [h for h in hosts if any(nic.rail == rail for nic in h.nics)]
        if len(on) <= REACH_ALL_PAIRS_MAX:
            pairs = [(a, b) for a in on for b in on if b is not a]
        else:
            sets: dict[str, list[NodeConfig]] = {}
            for h in on:
                sets.setdefault(h.nic(rail).subnet, []).append(h)
            pairs = []
            for members in sets.values():
                for i, a in enumerate(members):
                    if len(members) > 1:
                        pairs.append((a, members[(i + 1) % len(members)]))
                    pairs += [(a, other[i % len(other)]) for other in sets.values() if other is not members]
        for a, b in pairs:
            src, dst = a.nic(rail), b.nic(rail)
            if arp_proxy or src.subnet != dst.subnet:
                out.setdefault(a.name, []).append((rail, src.ip, dst.ip))
    return out


def check_reachability(rt: Runtime, cfgs: dict[str, NodeConfig]) -> list[dict]:
    """Ping per rail between the hosts reach_pairs picks (every pair on a rail of up to 16 hosts): every
    host's echoes at once, from this process where the hosts' namespaces are on this machine (local_reach),
    else from one prober per host (hpnlab.node.programs.reach; N processes for N hosts). Ablated labs are held to
    what their mechanisms allow: without the ARP proxy same-subnet pairs cannot talk (L2 broadcast is
    off), and without ARP duplication a ToR that never saw a host's ARP black-holes traffic to it; those
    pairs are reported, not required."""
    hosts = [c for c in cfgs.values() if c.role == "host"]
    mech = hosts[0].mechanisms if hosts else {}
    rails = sorted({nic.rail for h in hosts for nic in h.nics})
    by_host = reach_pairs(hosts, mech.get("arp_proxy", True))

    paths = {h.name: rt.netns_path(h.name) for h in hosts}
    if by_host and all(paths[n] for n in by_host):  # every host's namespace is here: probe from this process
        res = local_reach(paths, by_host)
    else:
        res = [x for rows in pmap(probe_in_node(rt), by_host.items(), 16) for x in rows]
    out = []
    strict = mech.get("arp_duplication", True)
    on_rail = {rail: sum(1 for h in hosts if h.nic(rail)) for rail in rails}
    for rail in rails:
        mine = [(s, d, ok) for r, s, d, ok in res if r == rail]
        bad = [f"{s}->{d}" for s, d, ok in mine if not ok]
        out.append(_check(f"reach rail {rail}", not bad or not strict,
                          f"{len(mine) - len(bad)}/{len(mine)} host pairs answer ping"
                          + (f" (of {on_rail[rail]} hosts: each to the next of its set and one host of every "
                             f"other set)" if on_rail[rail] > REACH_ALL_PAIRS_MAX else "")
                          + ("" if mech.get("arp_proxy", True) else " (same-subnet pairs skipped: arp_proxy off)")
                          + (f"; failing {', '.join(bad[:4])}" if bad else "")
                          + ("" if strict or not bad else " (expected with arp_duplication off)")))
    return out


def local_reach(paths: dict, by_host: dict[str, list[tuple[int, str, str]]]) -> list[tuple[int, str, str, bool]]:
    """Every host's echoes from this process: each host's sockets are opened inside its namespace (they stay
    there) and one wait serves them all (hpnlab.node.programs.reach.reach_groups), so a verify round costs no process
    per host and its CPU grows with the pairs, not with Python starts."""
    def opener(node):
        def open_in(src: str):
            with nsenter.entered(paths[node]):
                return reach.bound_socket(src)
        return open_in

    got = reach.reach_groups([(opener(n), [(s, d) for _r, s, d in pairs]) for n, pairs in by_host.items()])
    return [(rail, s, d, got.get(f"{s}>{d}", False)) for pairs in by_host.values() for rail, s, d in pairs]


def probe_in_node(rt: Runtime):
    """A prober process per host (hpnlab.node.programs.reach), for runtimes whose nodes this machine cannot enter."""
    import sys

    def probe(item):
        node, pairs = item
        try:
            r = rt.run(node, [sys.executable, "-m", "hpnlab.node.programs.reach", "--pairs",
                              ",".join(f"{s}:{d}" for _r, s, d in pairs)], check=False, timeout=30)
            got = json.loads(r.stdout or "{}")
        except (ValueError, RuntimeFailure):  # garbled, or a prober that hung past 30 s: no pair answered
            got = {}
        return [(rail, src, dst, bool(got.get(f"{src}>{dst}"))) for rail, src, dst in pairs]

    return probe


STAGES = [("config", check_config), ("agents", check_agents), ("lacp", check_lacp), ("bgp", check_bgp), ("routes", check_routes),
          ("reachability", check_reachability)]


def run_stages(rt: Runtime, cfgs: dict[str, NodeConfig], names: list[str] | None = None,
               stop_at_failure: bool = True, bgp_memo: PollMemo | None = None,
               deadline: float | None = None) -> list[tuple[str, list[dict]]]:
    """(stage, its checks) for the named stages (all by default), in STAGES' order; ``bgp_memo``: see
    check_bgp (a poll loop's, never a final verdict's). No stage starts after ``deadline`` (monotonic):
    a stage that began is run to its end, so a caller's bound is the deadline plus its longest stage."""
    out = []
    for stage, fn in STAGES:
        if names is not None and stage not in names:
            continue
        if deadline is not None and time.monotonic() > deadline:
            break
        res = fn(rt, cfgs, memo=bgp_memo) if fn is check_bgp and bgp_memo is not None else fn(rt, cfgs)
        out.append((stage, res))
        if stop_at_failure and not all(c["ok"] for c in res):
            break
    return out


def verify(rt: Runtime, cfgs: dict[str, NodeConfig], stop_at_failure: bool = True) -> list[dict]:
    return [c for _stage, res in run_stages(rt, cfgs, stop_at_failure=stop_at_failure) for c in res]


def complete(checks: list[dict]) -> bool:
    """All stages ran and passed."""
    return bool(checks) and all(c["ok"] for c in checks) and any(c["name"].startswith("reach") for c in checks)

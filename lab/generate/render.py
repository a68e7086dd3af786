"""Topology -> files. ``render`` is pure (returns {relative path: text}); ``write`` puts them on disk atomically."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import jinja2

from hpnlab import __version__
from hpnlab.model import capacity, netdefaults
from hpnlab.generate import frr
from hpnlab.errors import SpecError
from hpnlab.node import plan
from hpnlab.node.agents import fare
from hpnlab.model.paths import data_dir
from hpnlab.generate.picture import fabric_svg
from hpnlab.model.spec import FARE_MODES, SPRAY_MODES, LinkRate
from hpnlab.model.topology import IFNAMSIZ, Link, Node, Topology, check_interface_names, summary

# The node images a containerlab topology names (render writes them into it; `hpnlab images build` makes them).
IMAGES = {"router": f"hpnlab/router:{__version__}", "host": f"hpnlab/host:{__version__}"}

TEMPLATES = data_dir("templates")
HOST_ROUTE_TABLE = 10
STACK_TIMEOUT_MS = 1000  # a stacked pair declares sync (peer link) or heartbeat (out-of-band) lost after this
ROUTER_SYSCTLS = {
    "net.ipv4.ip_forward": 1,
    "net.ipv6.conf.all.forwarding": 1,
    # BGP peers over IPv6 link-local (unnumbered); Docker starts containers with IPv6 disabled.
    "net.ipv6.conf.all.disable_ipv6": 0,
    "net.ipv6.conf.default.disable_ipv6": 0,
    "net.ipv4.conf.all.rp_filter": 0,
    "net.ipv4.conf.default.rp_filter": 0,
    "net.ipv4.conf.all.ignore_routes_with_linkdown": 1,
    # TTL-limited path probes get every time-exceeded answer: no per-destination limit, and time
    # exceeded (type 11) taken out of the global ICMP budget's mask (default 6168 = types 3, 4, 11, 12).
    "net.ipv4.icmp_ratelimit": 0,
    "net.ipv4.icmp_ratemask": 6168 & ~(1 << 11),
}
HOST_SYSCTLS = {
    "net.ipv4.conf.all.rp_filter": 0,
    "net.ipv4.conf.default.rp_filter": 0,
    "net.ipv4.conf.all.ignore_routes_with_linkdown": 1,
    # Both ports carry the same IP: answer ARP only for addresses on the asking port.
    "net.ipv4.conf.all.arp_ignore": 1,
    # TCP's buffer bounds at the kernel's defaults, not whatever the root namespace holds (a new namespace
    # copies its values; hpnlab.model.netdefaults).
    **netdefaults.HOST_TCP_BUFFERS,
}


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def adjacency(topo: Topology) -> dict[str, list[tuple[Link, int]]]:
    """node -> [(link, which end is local: 0 = a, 1 = b)], built once (O(links)) for Pod-scale renders."""
    adj: dict[str, list[tuple[Link, int]]] = defaultdict(list)
    for lk in topo.links:
        adj[lk.a.node].append((lk, 0))
        adj[lk.b.node].append((lk, 1))
    return adj


def _ends(lk: Link, side: int):
    return (lk.a, lk.b) if side == 0 else (lk.b, lk.a)


def per_link_rates(topo: Topology) -> dict[tuple[str, str], LinkRate]:
    """(node, iface) of both ends of every link that ``links.per_link`` names -> its entry (rate, queue);
    one line naming the entry for a link that is not in the lab."""
    ends = {(e.node, e.iface): (lk, e) for lk in topo.links for e in (lk.a, lk.b)}
    out = {}
    for i, r in enumerate(topo.spec.links.per_link):
        if (r.node, r.iface) not in ends:
            have = sorted(e for n, e in ends if n == r.node)
            raise SpecError(f"spec field 'links.per_link.{i}': {r.node}:{r.iface} is not a link end of this lab"
                            + (f"; {r.node} has {', '.join(have)}" if have else f"; no node '{r.node}'"))
        lk, _e = ends[(r.node, r.iface)]
        if lk.kind not in ("access", "uplink", "core"):
            raise SpecError(f"spec field 'links.per_link.{i}': {r.node}:{r.iface} is a {lk.kind} link; "
                            f"give an access, uplink or core link")
        mode = topo.spec.multipath.mode
        if mode in FARE_MODES and lk.kind == "uplink" and not 1 <= r.rate_mbit <= 25600:
            # FARE carries an uplink's rate in BGP: FRR 8.4's 'set extcommunity bandwidth' takes 1..25600 Mbit/s
            raise SpecError(f"spec field 'links.per_link.{i}.rate_mbit': {r.rate_mbit:g} with multipath.mode "
                            f"'{mode}': an uplink's rate is carried in BGP as 1..25600 Mbit/s (FRR 8.4)")
        for e in (lk.a, lk.b):
            out[(e.node, e.iface)] = r
    return out


def node_config(topo: Topology, node: Node, adj: dict[str, list[tuple[Link, int]]],
                rates: dict[tuple[str, str], LinkRate] | None = None) -> dict:
    """What the runtime and the node's agent need to bring this node up, as plain JSON data."""
    spec = topo.spec.dilated()  # the timers the agents run (spec.time_dilation)
    k = spec.time_dilation
    rates = rates or {}
    ifaces = []
    for lk, side in adj[node.name]:
        local, remote = _ends(lk, side)
        ifc = {"name": local.iface, "mac": local.mac, "peer": remote.node, "peer_iface": remote.iface,
               "kind": lk.kind}
        shape = capacity.shape_of(getattr(spec.links, lk.kind, None))  # peer/oob links: never shaped
        own = rates.get((local.node, local.iface))
        if own:  # this link runs at its own rate (its own queue, else the class's, else 256 KB)
            queue = own.queue_kb * 1024 if own.queue_kb else shape["queue_bytes"] if shape else 256 * 1024
            shape = {"rate_kbit": max(1, round(own.rate_mbit * 1000)), "queue_bytes": queue}
        if shape:
            ifc["shape"] = shape
        ifaces.append(ifc)
    base = {"lab": topo.name, "name": node.name, "role": node.role, "interfaces": ifaces,
            "mechanisms": spec.mechanisms.model_dump(), "offloads": spec.links.offloads,
            **({"time_dilation": k} if k > 1 else {})}  # the agents scale their own timers (LACP, announcements)
    hashing = capacity.hash_sysctls(node.role, node.name, spec.hash.policy, spec.hash.seed)
    lacp = spec.lacp
    if node.role == "host":
        same_rail = defaultdict(list)
        for st in topo.sets:
            same_rail[st.rail].append(st.subnet)
        # A transport that waits longer before it re-sends (spec tcp_rto_min_ms) stalls longer on each loss.
        rto = {"net.ipv4.tcp_rto_min_us": spec.tcp_rto_min_ms * 1000} if spec.tcp_rto_min_ms else {}
        # A receiver that tolerates reordering (spec tcp_reordering) does not take a sprayed packet for a loss.
        reorder = {"net.ipv4.tcp_reordering": spec.tcp_reordering} if spec.tcp_reordering else {}
        base["sysctls"] = {**HOST_SYSCTLS, **hashing, **rto, **reorder}
        if topo.spec.host_rto_min_ms():  # dilated: on every route the host agent installs (a locked metric)
            base["rto_min_ms"] = topo.spec.host_rto_min_ms()
        base["micro_bfd"] = spec.micro_bfd.model_dump()
        # the kernel bond's LACP timers cannot be dilated: auto takes the userspace agent then (spec refuses bond)
        base["driver"] = "userspace" if k > 1 and spec.host_driver == "auto" else spec.host_driver
        base["lacp"] = {"system_priority": 65535, "key": 1, "fast_rate": lacp.fast_rate}
        base["nics"] = [{"rail": nic.rail, "ip": nic.ip, "mac": nic.mac, "subnet": nic.subnet,
                         "gateway": nic.gateway, "ports": nic.ports, "tors": nic.tors,
                         "remote_subnets": [s for s in same_rail[nic.rail] if s != nic.subnet]}
                        for nic in node.nics]
        return base
    base.update({"asn": node.asn, "router_id": node.router_id, "sysctls": {**ROUTER_SYSCTLS, **hashing}, "bfd": spec.bfd.enabled,
                 "fabric_ifaces": [i["name"] for i in ifaces if i["kind"] in plan.FABRIC_KINDS]})
    if spec.qos is not None:  # every shaped port of the switch queues by class (hpnlab.node.qos)
        base["qos"] = spec.qos.node_json()
    if node.role == "tor" and spec.multipath.mode in SPRAY_MODES:
        base["multipath"] = {"mode": spec.multipath.mode,
                             "uplinks": sorted(i["name"] for i in ifaces if i["kind"] == "uplink"),
                             **({"flowlet_gap_ms": spec.multipath.flowlet_gap_ms} if spec.multipath.mode == "flowlet"
                                else {}),
                             **({"dlb_interval_ms": spec.multipath.dlb_interval_ms} if spec.multipath.mode == "dlb"
                                else {})}
    elif node.role == "agg" and spec.multipath.mode in FARE_MODES:
        asn = {n.name: n.asn for n in topo.by_role("tor")}
        # spray-weighted's aggs advertise FARE's static capacities (the ToRs spray by the weights they make)
        mode = "fare" if spec.multipath.mode == "spray-weighted" else spec.multipath.mode
        base["multipath"] = {"mode": mode, "interval_s": spec.multipath.interval_s,
                             "tors": {i["name"]: asn[i["peer"]] for i in ifaces if i["peer"] in asn}}
    if node.role == "tor":
        host_ip = {(h.name, nic.rail): nic.ip for h in topo.by_role("host") for nic in h.nics}
        base.update({
            "segment": node.segment, "rail": node.rail, "side": node.side, "plane": node.plane,
            "subnet": node.subnet, "gateway": node.gateway, "table": HOST_ROUTE_TABLE,
            "lacp": {"system_mac": lacp.system_mac, "system_priority": lacp.system_priority, "key": lacp.key,
                     "port_offset": node.lacp_offset, "fast_rate": lacp.fast_rate},
            "host_ports": [{"iface": _ends(lk, side)[0].iface, "port_id": lk.lacp_port,
                            "host": _ends(lk, side)[1].node, "host_iface": _ends(lk, side)[1].iface,
                            "host_port": lk.host_port, "host_ip": host_ip[(_ends(lk, side)[1].node, node.rail)]}
                           for lk, side in adj[node.name] if lk.kind == "access"],
            # the hold-down waits for a route to each of these (the other sets of this rail)
            "remote_subnets": [st.subnet for st in topo.sets if st.rail == node.rail and st.subnet != node.subnet],
            "holddown": spec.holddown.model_dump(),
            # how long a silent ToR keeps its BGP sessions (BFD's detection, else the hold time): a ToR
            # stopped for longer resumes with stale routes, and the hold-down waits for them to be relearnt
            "session_detect_s": (spec.bfd.interval_ms * spec.bfd.multiplier / 1000 if spec.bfd.enabled
                                 else float(spec.bgp.hold)),
            **({"stacked": {"role": "primary" if node.side == "a" else "secondary",
                            "peer": next(i["peer"] for i in ifaces if i["kind"] == "peer"),
                            "sync_timeout_ms": STACK_TIMEOUT_MS * k, "heartbeat_timeout_ms": STACK_TIMEOUT_MS * k}}
               if spec.stacked else {}),
            "micro_bfd": spec.micro_bfd.model_dump(),
        })
    return base


def render(topo: Topology) -> dict[str, str]:
    env = _env()
    adj = adjacency(topo)
    files: dict[str, str] = {}
    spec = topo.spec.dilated()  # FRR runs the dilated timers (spec.time_dilation)
    too_long = check_interface_names(topo)
    if too_long:
        raise SpecError(f"interface name '{too_long[0]}' exceeds {IFNAMSIZ} characters; reduce the sizes")
    templates = {role: env.get_template(f"frr/{role}.conf.j2") for role in ("tor", "agg", "core")}
    daemons = env.get_template("frr/daemons.j2")
    rates = per_link_rates(topo)
    for node in topo.nodes:
        cfg = node_config(topo, node, adj, rates)
        files[f"{node.name}/node.json"] = json.dumps(cfg, indent=1) + "\n"
        # containerlab refuses a bind whose source does not exist: the run/ bind's folder ships with a note
        files[f"{node.name}/run/README"] = RUN_README
        if node.role == "host":
            continue
        ctx = {"node": node, "spec": spec, "fabric_ifaces": cfg["fabric_ifaces"], "table": HOST_ROUTE_TABLE,
               "fare": fare_config(cfg)}
        files[f"{node.name}/frr.conf"] = templates[node.role].render(ctx)
        files[f"{node.name}/daemons"] = daemons.render(ctx, frr=frr.daemons_file(spec.bfd.enabled))
    summ = summary(topo)
    files[f"{topo.name}.clab.yml"] = env.get_template("clab/topology.clab.yml.j2").render(
        topo=topo, summary=summ, images=IMAGES, version=__version__, mtu=plan.MTU,
        sysctls={"router": ROUTER_SYSCTLS, "host": HOST_SYSCTLS})
    files["topology.json"] = json.dumps(topo.to_dict(), indent=1) + "\n"
    files["fabric.svg"] = fabric_svg(topo)
    return files


def fare_config(cfg: dict) -> dict | None:
    """An agg's FARE route-maps at start-up, from its ports' rates (the agent keeps them current)."""
    if cfg["role"] != "agg" or not cfg.get("multipath"):  # a spraying ToR's multipath is not FARE's
        return None
    caps = fare.capacities(cfg)
    return {"lines": fare.config_lines(cfg, fare.bandwidths(cfg, caps, caps)), "neighbors": fare.neighbor_lines(cfg)}


RUN_README = ("This folder is bound into the node's container at /run/hpnlab. The node writes boot.json (its\n"
              "configuration steps), status.json (its agent's heartbeat) and agent.log here.\n")
MARKER = ".hpnlab-generated"  # written into every output directory; only such a directory is ever replaced


def write(files: dict[str, str], out: str | Path) -> Path:
    """Write all files or none: build in a sibling temp dir, then swap it in.

    An existing DIR is replaced only if it is empty or holds hpnlab's own marker file (written with every
    output), so a typo in --out never wipes someone's directory, even one that holds a topology.json.
    """
    try:
        return _write(files, Path(out).resolve())
    except OSError as e:
        raise SpecError(f"--out '{out}': {e.strerror or e.__class__.__name__}; choose a writable path") from None


def _write(files: dict[str, str], out: Path) -> Path:
    if out.exists():
        if not out.is_dir():
            raise SpecError(f"--out '{out}' exists and is not a directory; choose another path")
        if any(out.iterdir()) and not (out / MARKER).is_file():
            raise SpecError(f"--out '{out}' is a non-empty directory not made by hpnlab; choose an empty or new path")
    parent = out.parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    try:
        for rel, text in files.items():
            p = tmp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        (tmp / MARKER).write_text(f"generated by hpnlab {__version__}; this directory is replaced by the next "
                                  f"'hpnlab generate' to it\n")
        os.chmod(tmp, 0o755)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=parent))
            os.rename(out, old / "x")
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out

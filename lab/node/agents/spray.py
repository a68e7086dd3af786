"""Per-packet spraying on a ToR (spec ``multipath.mode: spray``): the routing tables that make it follow BGP.

A switch that sprays picks a next hop per packet among a destination's equal-cost ones. Linux picks a
multipath route's next hop by hash (per flow), so the lab builds the choice from three parts:

- nftables marks every packet that arrives from a host port with ``numgen inc mod N`` mapped to one of N
  marks, one per uplink (hpnlab.node.plan.spray_ruleset): consecutive packets get consecutive uplinks;
- ``ip rule fwmark M lookup T`` sends a packet marked M to uplink M's own table T (plan.ip_batch);
- this keeper fills table T: for every BGP route of the main table, the same prefix through uplink T's
  next hop alone when bgpd installed that next hop, else a ``throw`` route, so the lookup goes on to
  the main table and its hash (the prefix must not be matched by a shorter route of T that still goes
  through uplink T: a /32 host route withdrawn from one agg would otherwise be sent there by its /24).

Why the tables follow the main table instead of a fixed copy: when a link or an agg fails, bgpd (BFD, the
hold timer) withdraws that next hop from the main table; the keeper sees the route change on rtnetlink and
turns the prefix into a throw in the failed uplink's table, so packets marked for it take the main
table's surviving next hops. Until the keeper has done so, packets marked for the dead next hop are lost:
its reaction (``lag_ms``: from the route event to the tables rewritten) adds to the fabric's convergence,
and the status reports it. A carrier loss needs no keeper: with ignore_routes_with_linkdown the kernel
skips the dead next hop in table T too and the rule falls through to the main table.

Runs as a thread of the ToR agent (hpnlab.node.agents.tor), inside the ToR's namespace; standard library and
``ip`` only (the node image carries no pyroute2).
"""

from __future__ import annotations

import json
import math
import select
import socket
import subprocess
import threading
import time

from hpnlab.node.agents.agent import log
from hpnlab.node.sprayrules import FLOW, SPRAY_NFT_TABLE, SPRAY_TABLE, flowlet_lines, spray_rule, table_of  # noqa: F401
from hpnlab.node.rtnl import RTM_DELROUTE, RTM_NEWROUTE, RTMGRP_IPV4_ROUTE, nl_messages, parse_route, rtnl_socket

MODES = ("spray", "spray-weighted", "flowlet", "dlb")
DLB_SLOTS = 20  # dlb: the numgen cycle its shares are cut into (a share of 1/20 at least for a live uplink)
MAIN = 254
RESYNC_S = 5.0  # safety net behind the route events: the main table is read whole this often
SETTLE_S = 0.005  # after a route event, wait this long for its siblings (bgpd installs a burst at a time)


def hops(route: dict) -> list[dict]:
    """``ip -j route`` entry -> its next hops, each {dev, via: (family, address) or None, onlink}."""
    out = []
    for h in route.get("nexthops") or [route]:
        dev = h.get("dev")
        if not dev:
            continue
        via = None
        if isinstance(h.get("via"), dict) and h["via"].get("host"):  # RTA_VIA: an IPv6 next hop of an IPv4 route
            via = (h["via"].get("family", "inet6"), h["via"]["host"])
        elif h.get("gateway"):
            via = ("inet6" if ":" in h["gateway"] else "inet", h["gateway"])
        out.append({"dev": dev, "via": via, "onlink": "onlink" in (h.get("flags") or [])})
    return out


def wanted(routes: list[dict], uplinks: list[str]) -> dict[int, dict[str, str]]:
    """The main table's BGP routes -> table -> prefix -> the ``ip route`` words after 'route replace'."""
    out: dict[int, dict[str, str]] = {table_of(k): {} for k in range(len(uplinks))}
    for r in routes:
        if r.get("protocol") != "bgp" or r.get("type", "unicast") != "unicast":
            continue
        dst = r.get("dst", "")
        if not dst or dst == "default":
            continue
        dst = dst if "/" in dst else f"{dst}/32"
        by_dev = {h["dev"]: h for h in hops(r)}
        for k, up in enumerate(uplinks):
            h = by_dev.get(up)
            if h is None or h["via"] is None:
                words = f"throw {dst}"
            else:
                fam, addr = h["via"]
                words = f"{dst} via {'inet6 ' if fam == 'inet6' else ''}{addr} dev {up}" + (
                    " onlink" if h["onlink"] else "")
            out[table_of(k)][dst] = words
    return out


def dlb_shares(caps: list[float], backlog: list[int], limit: list[int], up: list[bool],
               slots: int = DLB_SLOTS) -> list[int]:
    """dlb: each uplink's share of ``slots`` packets: capacity x (1 - backlog / limit), at least one slot for
    a live uplink (a full queue still drains: it must not be starved of the measurements' turn), none for a
    dead one; largest remainders round."""
    w = [c * max(0.0, 1 - b / lim) if u and lim else 0.0 for c, b, lim, u in zip(caps, backlog, limit, up)]
    live = [k for k, u in enumerate(up) if u]
    if not live:
        return [1] * len(caps)
    if sum(w) <= 0:
        w = [c if u else 0.0 for c, u in zip(caps, up)]
    raw = [slots * x / sum(w) for x in w]
    out = [int(x) for x in raw]
    for k in sorted(live, key=lambda k: raw[k] - out[k], reverse=True)[:slots - sum(out)]:
        out[k] += 1
    for k in live:  # a live uplink keeps one slot, taken from the largest share
        if out[k] == 0:
            out[out.index(max(out))] -= 1
            out[k] = 1
    return out


def weighted_rules(routes: list[dict], uplinks: list[str], ports: list[str]) -> list[str]:
    """spray-weighted: per BGP prefix whose next hops weigh unequally (FARE's weights, as bgpd installed them),
    a rule spraying in those shares, longest prefix first (each ends the chain for its packets); then the
    plain 1:1 rule for everything else."""
    rows = []
    for r in routes:
        if r.get("protocol") != "bgp" or not r.get("nexthops"):
            continue
        dst = r["dst"] if "/" in r["dst"] else f"{r['dst']}/32"
        w = {}
        for h in r["nexthops"]:
            w[h.get("dev")] = w.get(h.get("dev"), 0) + int(h.get("weight", 1))
        shares = [w.get(u, 0) for u in uplinks]
        if sum(1 for x in shares if x) < 2 or len(set(x for x in shares if x)) == 1:
            continue  # one uplink (the tables throw the rest) or equal weights: the plain rule does it
        g = math.gcd(*[x for x in shares if x])
        rows.append((int(dst.split("/")[1]), dst, [x // g for x in shares]))
    rows.sort(key=lambda x: (-x[0], x[1]))
    return [spray_rule(ports, sh, f"ip daddr {dst} ") for _l, dst, sh in rows] + [spray_rule(ports, [1] * len(uplinks))]


def batch(have: dict[int, dict[str, str]], want: dict[int, dict[str, str]]) -> list[str]:
    """``ip -batch`` lines that turn the tables ``have`` into ``want`` (only what changed)."""
    lines = []
    for t, rows in want.items():
        old = have.get(t, {})
        lines += [f"route replace {w} table {t}" for p, w in sorted(rows.items()) if old.get(p) != w]
        lines += [f"route del {p} table {t}" for p in sorted(set(old) - set(rows))]
    return lines


class Keeper(threading.Thread):
    """Keeps the per-uplink tables in step with the main table (module docstring)."""

    def __init__(self, cfg: dict):
        super().__init__(name="spray", daemon=True)
        mp = cfg["multipath"]
        self.mode = mp["mode"]
        self.uplinks = list(mp["uplinks"])
        self.ports = [hp["iface"] for hp in cfg["host_ports"]]
        self.have: dict[int, dict[str, str]] = {}
        self.rules: list[str] = [spray_rule(self.ports, [1] * len(self.uplinks))]  # what the node plan installed
        self.rule_writes = 0
        shape = {i["name"]: i.get("shape") or {} for i in cfg["interfaces"]}
        # dlb: each uplink's capacity and queue limit as the node plan shaped it (unshaped: equal, 256 KB)
        self.caps = [float(shape[u].get("rate_kbit", 1)) for u in self.uplinks]
        self.limits = [int(shape[u].get("queue_bytes", 256 * 1024)) for u in self.uplinks]
        self.dlb_s = mp.get("dlb_interval_ms", 0) / 1000 if self.mode == "dlb" else None
        self.shares = [1] * len(self.uplinks)
        self.ticks, self.tick_ms_max, self.write_ms_max, self.period_ms, self.period_ms_max = 0, 0.0, 0.0, None, 0.0
        self._qsock = None
        self.syncs = self.writes = self.failures = 0
        self.last_lag_ms: float | None = None
        self.max_lag_ms = 0.0
        self.error: str | None = None

    def read_main(self) -> list[dict]:
        r = subprocess.run(["ip", "-4", "-j", "route", "show", "table", "main"], capture_output=True, text=True,
                           timeout=10)
        return json.loads(r.stdout or "[]")

    def write_rules(self, rules: list[str]) -> None:
        """Replace the spray chain's rules in one nftables transaction (no packet sees a half-written chain)."""
        chain = f"ip {SPRAY_NFT_TABLE} spray"
        text = "\n".join([f"flush chain {chain}", *(f"add rule {chain} {r}" for r in rules)]) + "\n"
        r = subprocess.run(["nft", "-f", "-"], input=text, capture_output=True, text=True, timeout=10)
        if r.returncode != 0:
            raise RuntimeError(f"nft: {(r.stderr or r.stdout).strip()[:300]}")
        self.rules = rules
        self.rule_writes += 1

    def backlogs(self) -> tuple[list[int], list[bool]]:
        """dlb: each uplink's queue backlog now (one rtnetlink qdisc dump) and whether it has carrier."""
        from hpnlab.node import linkstats

        if self._qsock is None:
            self._qsock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
            self._qsock.bind((0, 0))
            self._idx = {u: socket.if_nametoindex(u) for u in self.uplinks}
        self.ticks += 1
        q = linkstats.dump(self._qsock, self.ticks)
        up = []
        for u in self.uplinks:
            try:
                with open(f"/sys/class/net/{u}/carrier") as f:
                    up.append(f.read().strip() == "1")
            except OSError:
                up.append(False)
        return [int((q.get(self._idx[u]) or {}).get("backlog", 0)) for u in self.uplinks], up

    def dlb_tick(self) -> None:
        t = time.monotonic()
        backlog, up = self.backlogs()
        shares = dlb_shares(self.caps, backlog, self.limits, up)
        # hysteresis: a one-slot wobble is not worth an nftables transaction (each is a process start)
        if max(abs(a - b) for a, b in zip(shares, self.shares)) >= 2 or \
                any((a == 0) != (b == 0) for a, b in zip(shares, self.shares)):
            w = time.monotonic()
            self.write_rules([spray_rule(self.ports, shares)])
            self.write_ms_max = max(self.write_ms_max, round((time.monotonic() - w) * 1000, 2))
            self.shares = shares
        self.tick_ms_max = max(self.tick_ms_max, round((time.monotonic() - t) * 1000, 2))

    def sync(self, event_at: float | None) -> None:
        main = self.read_main()
        if self.mode == "spray-weighted":
            rules = weighted_rules(main, self.uplinks, self.ports)
            if rules != self.rules:
                self.write_rules(rules)
        want = wanted(main, self.uplinks)
        lines = batch(self.have, want)
        self.syncs += 1
        if lines:
            r = subprocess.run(["ip", "-force", "-batch", "-"], input="\n".join(lines) + "\n", capture_output=True,
                               text=True, timeout=10)
            if r.returncode != 0:  # -force went on past the failing line; the next resync retries it
                self.failures += 1
                self.error = (r.stderr or r.stdout).strip()[:300]
                log(f"spray: ip -batch: {self.error}")
                self.have = {}
                return
            self.writes += len(lines)
        self.have = want
        if event_at is not None and lines:
            self.last_lag_ms = round((time.monotonic() - event_at) * 1000, 1)
            self.max_lag_ms = max(self.max_lag_ms, self.last_lag_ms)

    def run(self) -> None:
        nl = rtnl_socket(RTMGRP_IPV4_ROUTE)  # bound before the first read: no change is missed
        log(f"spray keeper up: {self.mode} over {', '.join(self.uplinks)} (tables {table_of(0)}.."
            f"{table_of(len(self.uplinks) - 1)})")
        last = 0.0
        next_dlb = prev_dlb = time.monotonic()
        while True:
            try:
                due = last + RESYNC_S if self.dlb_s is None else min(last + RESYNC_S, next_dlb)
                ready, _, _ = select.select([nl], [], [], max(0.0, due - time.monotonic()))
                if self.dlb_s is not None and time.monotonic() >= next_dlb:
                    now = time.monotonic()
                    # the period the agent actually keeps (its own work and the CPU's other demands included)
                    self.period_ms = round((now - prev_dlb) * 1000, 2) if self.ticks else None
                    self.period_ms_max = max(self.period_ms_max, self.period_ms or 0.0)
                    prev_dlb, next_dlb = now, max(next_dlb + self.dlb_s, now)
                    self.dlb_tick()
                    if not ready:
                        continue
                event_at = None
                if ready:
                    event_at = time.monotonic()
                    time.sleep(SETTLE_S)
                    msgs, overrun = nl_messages(nl)
                    # our own writes to the per-uplink tables come back as events too: only the main table's count
                    if not overrun and not any(t in (RTM_NEWROUTE, RTM_DELROUTE) and parse_route(p)[0] == MAIN
                                               for t, p in msgs):
                        continue
                self.sync(event_at)
                last = time.monotonic()
            except Exception as e:  # noqa: BLE001 - the keeper must outlive one bad read; the status says it
                self.failures += 1
                self.error = f"{e.__class__.__name__}: {e}"[:300]
                log(f"spray: {self.error}")
                time.sleep(1.0)

    def status(self) -> dict:
        return {"mode": self.mode, "uplinks": self.uplinks,
                "routes": {str(t): len(v) for t, v in self.have.items()}, "syncs": self.syncs, "writes": self.writes,
                "failures": self.failures, "last_lag_ms": self.last_lag_ms, "max_lag_ms": self.max_lag_ms,
                "error": self.error,
                **({"rules": self.rules, "rule_writes": self.rule_writes} if self.mode == "spray-weighted" else {}),
                **({"shares": self.shares, "ticks": self.ticks, "rule_writes": self.rule_writes,
                    "period_ms": self.period_ms, "period_ms_max": self.period_ms_max,
                    "tick_ms_max": self.tick_ms_max, "write_ms_max": self.write_ms_max}
                   if self.mode == "dlb" else {})}

"""FARE on an agg: capacity-aware weights for ECMP, carried in BGP (spec ``multipath.mode: fare``).

The FARE draft weighs a path L1 -> S -> L2 (ToR, agg, ToR) by min(capacity of L1-S, capacity of S-L2);
its adaptive form uses the available capacity (capacity minus load) instead. Both links of that path
end on the agg S, so S alone can compute every weight for the paths through it. It says them with the
BGP link-bandwidth extended community: on the session to L1, every route that L2 originated (as-path
exactly L2's ASN: ToRs have unique ASNs) carries ``bandwidth min(...)``. L1's bgpd turns the bandwidths
of its paths into nexthop weights and zebra installs them in the kernel, whose hash-threshold then
splits flows in proportion (8.4 rounds each weight to floor(100 x bw / sum), at least 1).

This module is the agg's side: the pure computation and the FRR configuration it renders (used by the
renderer for the start-up configuration), and the agent that keeps the bandwidths current: every
``interval_s`` it reads its links' rates (the tbf in force on each port: what a degraded bundle changes)
and, in the adaptive mode, their load (the ports' byte counters), and when a bandwidth changes it
rewrites that route-map entry through vtysh and refreshes the session (``clear ... soft out``).

Run inside the agg's namespace: ``python -m hpnlab.node.agents.fare NODE_JSON [--status FILE]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from hpnlab.node.agents.agent import StatusFile, agent_main, log

MIN_MBIT, MAX_MBIT = 1, 25600  # FRR 8.4's 'set extcommunity bandwidth' range
ROUTE_MAP = "FARE-{iface}"  # one per session to a ToR (the agg names that interface after the ToR)
AS_PATH = "FARE-AS{asn}"  # the routes one ToR originated
OTHER_SEQ = 65000  # everything else passes unchanged
FRR_RUN = "/var/run/frr"


def seq(k: int) -> int:
    return 10 * (k + 1)


def mbit(kbit: float) -> int:
    return int(min(MAX_MBIT, max(MIN_MBIT, round(kbit / 1000))))


def capacities(cfg: dict) -> dict[str, int]:
    """Each ToR-facing port's rate as node.json sets it (kbit/s)."""
    shape = {i["name"]: (i.get("shape") or {}).get("rate_kbit") for i in cfg["interfaces"]}
    return {i: shape[i] for i in cfg["multipath"]["tors"] if shape.get(i)}


def bandwidths(cfg: dict, up: dict[str, float], down: dict[str, float]) -> dict[tuple[str, str], int]:
    """(port to L1, port to L2) -> Mbit/s that this agg advertises to L1 for L2's routes: min of what the
    path can carry from L1 into this agg (``up``, per port) and from this agg on to L2 (``down``)."""
    ports = sorted(cfg["multipath"]["tors"])
    return {(a, b): mbit(min(up[a], down[b])) for a in ports for b in ports
            if a != b and a in up and b in down}


def config_lines(cfg: dict, bw: dict[tuple[str, str], int]) -> list[str]:
    """The as-path lists and route-maps (FRR configuration lines, before ``router bgp``)."""
    tors = cfg["multipath"]["tors"]
    ports = sorted(tors)
    lines = [f"bgp as-path access-list {AS_PATH.format(asn=tors[p])} seq 5 permit ^{tors[p]}$" for p in ports]
    for a in ports:
        name = ROUTE_MAP.format(iface=a)
        for k, b in enumerate(ports):
            if (a, b) in bw:
                lines += [f"route-map {name} permit {seq(k)}", f" match as-path {AS_PATH.format(asn=tors[b])}",
                          f" set extcommunity bandwidth {bw[(a, b)]}"]
        lines.append(f"route-map {name} permit {OTHER_SEQ}")
    return lines


def neighbor_lines(cfg: dict) -> list[str]:
    """The address-family lines that attach each session's route-map."""
    return [f"  neighbor {p} route-map {ROUTE_MAP.format(iface=p)} out" for p in sorted(cfg["multipath"]["tors"])]


def update_commands(cfg: dict, old: dict, new: dict) -> tuple[list[str], list[str]]:
    """vtysh commands that turn the ``old`` bandwidths into the ``new`` ones, and the sessions to refresh."""
    ports = sorted(cfg["multipath"]["tors"])
    cmds, touched = ["configure terminal"], []
    for (a, b), v in sorted(new.items()):
        if old.get((a, b)) != v:
            cmds += [f"route-map {ROUTE_MAP.format(iface=a)} permit {seq(ports.index(b))}",
                     f"set extcommunity bandwidth {v}", "exit"]
            if a not in touched:
                touched.append(a)
    return (cmds + ["end"] if touched else []), touched


# --- reading the ports ------------------------------------------------------------------------------------
def tbf_rates(text: str) -> dict[str, int]:
    """``tc -j qdisc show`` -> port -> kbit/s of the root tbf (tc prints the rate in bytes/s)."""
    out = {}
    for q in json.loads(text or "[]"):
        if q.get("root") and q.get("kind") == "tbf":
            out[q["dev"]] = round(q.get("options", {}).get("rate", 0) * 8 / 1000)
    return out


def counters(ports: list[str]) -> dict[str, tuple[int, int]]:
    out = {}
    for p in ports:
        try:
            with open(f"/sys/class/net/{p}/statistics/rx_bytes") as rx, \
                    open(f"/sys/class/net/{p}/statistics/tx_bytes") as tx:
                out[p] = (int(rx.read()), int(tx.read()))
        except (OSError, ValueError):
            pass
    return out


def vty_dir(cfg: dict) -> str | None:
    """The namespace runtime's pathspace of this router, else the container's only FRR (None)."""
    d = os.path.join(FRR_RUN, f"{cfg['lab']}-{cfg['name']}")
    return d if os.path.isdir(d) else None


class FareAgent:
    def __init__(self, cfg: dict, status: str | None):
        self.cfg = cfg
        self.mode = cfg["multipath"]["mode"]
        self.interval = float(cfg["multipath"]["interval_s"])
        self.ports = sorted(cfg["multipath"]["tors"])
        caps = capacities(cfg)
        self.advertised = bandwidths(cfg, caps, caps)  # what the rendered configuration starts with
        self.status = StatusFile(status)
        self.vty = vty_dir(cfg)
        self.updates, self.failures, self.last_update = 0, 0, None
        self.caps, self.avail_up, self.avail_down = dict(caps), dict(caps), dict(caps)
        self._prev: tuple[float, dict] | None = None

    def vtysh(self, commands: list[str]) -> bool:
        argv = ["vtysh"] + (["--vty_socket", self.vty] if self.vty else [])
        for c in commands:
            argv += ["-c", c]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as e:
            log(f"vtysh: {e}")
            return False
        if r.returncode != 0:
            log(f"vtysh exited {r.returncode}: {(r.stdout + r.stderr).strip()[:300]}")
        return r.returncode == 0

    def measure(self) -> None:
        try:
            text = subprocess.run(["tc", "-j", "qdisc", "show"], capture_output=True, text=True, timeout=10).stdout
            rates = tbf_rates(text)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            return
        self.caps = {p: rates[p] for p in self.ports if p in rates}
        self.avail_up, self.avail_down = dict(self.caps), dict(self.caps)
        if self.mode != "fare-adaptive":
            return
        now, cnt = time.monotonic(), counters(self.ports)
        if self._prev is not None:
            dt = now - self._prev[0]
            for p, (rx, tx) in cnt.items():
                if p in self._prev[1] and p in self.caps and dt > 0:
                    rx0, tx0 = self._prev[1][p]
                    # into this agg from the ToR on p (its uplink), and out of it towards the ToR on p
                    self.avail_up[p] = max(0.0, self.caps[p] - (rx - rx0) * 8 / 1000 / dt)
                    self.avail_down[p] = max(0.0, self.caps[p] - (tx - tx0) * 8 / 1000 / dt)
        self._prev = (now, cnt)

    def step(self) -> None:
        self.measure()
        new = bandwidths(self.cfg, self.avail_up, self.avail_down)
        cmds, touched = update_commands(self.cfg, self.advertised, new)
        if not touched:
            return
        t = time.time()
        # one vtysh: the entries, then (back in enable mode after 'end') each changed session's refresh
        if self.vtysh(cmds + [f"clear bgp ipv4 unicast {p} soft out" for p in touched]):
            self.advertised = new
            self.updates += 1
            self.last_update = {"time": t, "took_s": round(time.time() - t, 3), "sessions": touched}
        else:
            self.failures += 1

    def snapshot(self) -> dict:
        return {"node": self.cfg["name"], "role": "agg", "mode": self.mode, "capacity_kbit": self.caps,
                "advertised_mbit": {f"{a}>{b}": v for (a, b), v in sorted(self.advertised.items())},
                "updates": self.updates, "failures": self.failures, "last_update": self.last_update}

    def run(self) -> None:
        log(f"FARE agent up: {self.mode}, {len(self.ports)} ToR sessions, every {self.interval:g} s")
        due = 0.0
        while True:  # the heartbeat every second, the weights every interval_s
            if time.monotonic() >= due:
                due = time.monotonic() + self.interval
                self.step()
            self.status.write(self.snapshot())
            time.sleep(min(1.0, self.interval))

    def stop(self) -> None:
        log("stopping")


def main(argv: list[str] | None = None) -> int:
    return agent_main(FareAgent, __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())

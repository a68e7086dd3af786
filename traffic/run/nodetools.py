"""Controller side of the tools run inside a node: scapy path/ARP/LACP probes (hpnlab.node.programs.craft) and
tcpdump captures. Library calls, used by the CLI (``hpnlab probe``, ``hpnlab capture``), the Python API
and the pytest plugin alike; everything goes through the runtime interface, never a shell."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from hpnlab.lifecycle import fare
from hpnlab.errors import RuntimeFailure, SpecError
from hpnlab.model.models import Nic, NodeConfig
from hpnlab.machine.proc import run
from hpnlab.runtime.base import Runtime


def node_cfg(cfgs: dict[str, NodeConfig], node: str, role: str | None = None) -> NodeConfig:
    if node not in cfgs:
        raise SpecError(f"node '{node}' is not in the lab; nodes: {', '.join(sorted(cfgs))}")
    if role and cfgs[node].role != role:
        raise SpecError(f"node '{node}' is a {cfgs[node].role}; give a {role}")
    return cfgs[node]


def node_iface(cfgs: dict[str, NodeConfig], node: str, iface: str) -> NodeConfig:
    cfg = node_cfg(cfgs, node)
    if iface not in cfg.iface_names:
        raise SpecError(f"iface '{iface}' is not an interface of {node}; it has {', '.join(cfg.iface_names)}")
    return cfg


def nic_of(cfg: NodeConfig, rail: int) -> Nic:
    nic = cfg.nic(rail)
    if nic is None:
        raise SpecError(f"rail: {rail} is not a rail of host {cfg.name}")
    return nic


def craft(rt: Runtime, node: str, argv: list[str], timeout: float = 60) -> dict:
    """Run ``python -m hpnlab.node.programs.craft ARGV`` inside the node; its JSON answer."""
    r = run(rt.exec_argv(node, [sys.executable, "-m", "hpnlab.node.programs.craft", *argv]), timeout=timeout,
            what=f"{node}: scapy probe")
    return json.loads(r.stdout)


def path_map(rt: Runtime, cfgs: dict, src: str, dsts: list[str], rail: int = 0, sports: list[int] | None = None,
             dport: int = 33434, proto: str = "udp", timeout: float = 120) -> list[dict]:
    """Where each 5-tuple (src host -> each dst host, source port) goes: the host port and ToR it leaves
    by, the agg, and the far ToR (TTL 1, 2, 3 probes through the kernel's own hash). One scapy run on
    the source host covers every destination. Rows: {src, dst, sport, port, tor, agg, dst_tor}."""
    snic = nic_of(node_cfg(cfgs, src, "host"), rail)
    dips = {nic_of(node_cfg(cfgs, d, "host"), rail).ip: d for d in dsts}
    sports = sports or list(range(20000, 20016))
    res = craft(rt, src, ["paths", "--src", snic.ip, "--dst", ",".join(dips), "--gateway", snic.gateway,
                          "--sports", ",".join(map(str, sports)), "--ifaces", ",".join(snic.ports),
                          "--dport", str(dport), "--ttls", "1,2,3", "--proto", proto], timeout=timeout)
    by_dst = res.get("by_dst") or {next(iter(dips)): res["paths"]}
    loop = {c.router_id: n for n, c in cfgs.items() if c.role != "host"}
    port_tor = dict(zip(snic.ports, snic.tors))
    rows = []
    for dip, dst in dips.items():
        got = by_dst.get(dip, {})
        for sp in sports:
            h = got.get(str(sp), {})
            port = h.get("tor", {}).get("iface")
            far = [loop.get(a, a) for a in h.get("hops", [])]
            rows.append({"src": src, "dst": dst, "sport": sp, "port": port, "tor": port_tor.get(port, "?"),
                         "agg": far[0] if far else "?", "dst_tor": far[1] if len(far) > 1 else "?"})
    return rows


def paths(rt: Runtime, cfgs: dict, src: str, dst: str, rail: int = 0, sports: list[int] | None = None,
          dport: int = 33434, proto: str = "udp") -> dict:
    """Which ToR, agg and far ToR each source port takes from src to dst.
    Returns {"src", "dst", "dport", "proto", "paths": [{"sport", "tor", "agg", "dst_tor"}]}."""
    rows = path_map(rt, cfgs, src, [dst], rail, sports, dport, proto)
    return {"src": nic_of(cfgs[src], rail).ip, "dst": nic_of(cfgs[dst], rail).ip, "dport": dport,
            "proto": proto, "paths": [{k: r[k] for k in ("sport", "tor", "agg", "dst_tor")} for r in rows],
            "shares": shares(rt, rows, nic_of(cfgs[dst], rail).subnet)}


def shares(rt: Runtime, rows: list[dict], subnet: str) -> dict[str, dict]:
    """Per first-hop ToR: the share of the probed source ports each agg got, beside the share of the ToR's
    kernel nexthop weights for the destination's subnet (equal under ECMP; FARE's under multipath fare)."""
    by: dict[str, dict[str, int]] = {}
    for r in rows:
        if r["tor"] != "?" and r["agg"] != "?":
            by.setdefault(r["tor"], {}).setdefault(r["agg"], 0)
            by[r["tor"]][r["agg"]] += 1
    out = {}
    for tor, n in sorted(by.items()):
        routes = rt.run(tor, ["ip", "-4", "-j", "route", "show"], check=False, timeout=10).stdout
        w = fare.kernel_weights(routes, [subnet]).get(str(subnet), {})
        tw, tn = sum(w.values()), sum(n.values())
        out[tor] = {a: {"ports": round(n.get(a, 0) / tn, 3), "weight": round(w[a] / tw, 3) if tw and a in w else None}
                    for a in sorted(set(n) | set(w))}
    return out


def arp(rt: Runtime, cfgs: dict, node: str, iface: str, target: str) -> dict:
    """An ARP request out of one host port: who answers, with which MAC."""
    cfg = node_iface(cfgs, node, iface)
    if cfg.role != "host":
        raise SpecError("probe arp is sent from a host port; give a host node")
    nic = next(n for n in cfg.nics if iface in n.ports)
    return craft(rt, node, ["arp", "--iface", iface, "--src-ip", nic.ip, "--target", target])


def lacp(rt: Runtime, cfgs: dict, node: str, iface: str, wait: float = 3.0) -> dict:
    """The LACPDUs heard on a node port, decoded."""
    node_iface(cfgs, node, iface)
    return craft(rt, node, ["lacp", "--iface", iface, "--wait", str(wait)])


class Capture:
    """tcpdump on one node interface into a pcap; ``stop()`` ends it and returns the pcap's path."""

    def __init__(self, rt: Runtime, cfgs: dict, node: str, iface: str, out: Path, count: int | None = None,
                 filter: str | None = None, snaplen: int = 256):
        node_iface(cfgs, node, iface)
        if not shutil.which("tcpdump"):
            raise RuntimeFailure("tcpdump not found: install Debian's tcpdump (sudo ./bootstrap install)")
        self.out = Path(out).resolve()
        # over a remote channel the pcap streams back on stdout (the node cannot write our files)
        remote = rt.channel.remote
        argv = ["tcpdump", "-i", iface, "-w", "-" if remote else str(self.out), "-U", "-n", "-s", str(snaplen)]
        if count:
            argv += ["-c", str(count)]
        if filter:
            argv += [filter]  # one argument: tcpdump parses it, no shell involved
        self._sink = open(self.out, "wb") if remote else None
        self.proc = subprocess.Popen(rt.exec_argv(node, argv), stderr=subprocess.PIPE, text=True,
                                     stdout=self._sink, start_new_session=True)
        self.summary = ""

    def wait(self, timeout: float | None) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass

    def stop(self) -> Path:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if self._sink:
            self._sink.close()
        if not self.out.exists():
            raise RuntimeFailure(f"tcpdump wrote nothing: {(err or '').strip().splitlines()[-1:]}")
        self.summary = next((ln for ln in (err or "").splitlines() if "captured" in ln), "")
        return self.out

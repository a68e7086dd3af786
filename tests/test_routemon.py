"""The route watcher: one process with a netlink socket inside each router's namespace, decoded with
pyroute2; its JSON lines and ``ip monitor``'s text parse to the same events."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from hpnlab.traffic.run import routemon


def test_watcher_lines_parse_like_ip_monitor_lines():
    lines = [{"ts": 100.5, "event": "add", "prefix": "10.0.0.2/32", "table": 254, "type": 1, "via": "agg0-0 agg0-1"},
             {"ts": 100.7, "event": "del", "prefix": "10.0.0.2/32", "table": 254, "type": 1, "via": ""},
             {"ts": 100.8, "event": "add", "prefix": "127.0.0.1/32", "table": 255, "type": 2, "via": "lo"}]
    text = "\n".join(json.dumps(d) for d in lines) + "\n{not json\n"
    ev = routemon.parse(text, "s0r0a", None)
    assert [(e["event"], e["prefix"], e["via"]) for e in ev] == [("add", "10.0.0.2/32", "agg0-0 agg0-1"),
                                                               ("del", "10.0.0.2/32", "")]
    assert ev[0]["ts"] == 100.5 and ev[0]["node"] == "s0r0a"
    assert routemon.parse(text, "x", {"10.9.9.9/32"}) == []


class _Rt:
    """The one runtime call watch() makes: a node's namespace name."""

    def __init__(self, names: dict[str, str]):
        self.names = names

    def netns(self, node: str) -> str:
        return self.names[node]


def test_one_process_watches_routers_in_their_namespaces(tmp_path):
    if os.geteuid() != 0 or not shutil.which("ip"):
        why = "needs root and ip (iproute2) for two scratch network namespaces"
        print(f"SKIP: {why}", file=sys.stderr)
        pytest.skip(why)
    names = {f"r{i}": f"hpnlabtest-rm{os.getpid()}-{i}" for i in range(2)}
    made = []
    try:
        for ns in names.values():
            subprocess.run(["ip", "netns", "add", ns], check=True)
            made.append(ns)
            subprocess.run(["ip", "-n", ns, "link", "add", "d0", "type", "veth", "peer", "name", "d1"], check=True)
            for ifc in ("d0", "d1", "lo"):
                subprocess.run(["ip", "-n", ns, "link", "set", ifc, "up"], check=True)
        procs = routemon.watch(_Rt(names), list(names), tmp_path)
        # both namespaces reachable: one watcher process, no ip monitor
        assert [n for n, _p in procs] == ["route-watcher"]
        try:
            before = time.time()
            subprocess.run(["ip", "-n", names["r0"], "route", "add", "10.7.0.1/32", "dev", "d0"], check=True)
            subprocess.run(["ip", "-n", names["r1"], "route", "add", "blackhole", "10.7.1.0/24"], check=True)
            subprocess.run(["ip", "-n", names["r0"], "route", "del", "10.7.0.1/32"], check=True)
            after = time.time()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                r0 = routemon.parse((tmp_path / "routes-r0.log").read_text(), "r0", {"10.7.0.1/32"})
                r1 = routemon.parse((tmp_path / "routes-r1.log").read_text(), "r1", {"10.7.1.0/24"})
                if len(r0) == 2 and r1:
                    break
                time.sleep(0.05)
        finally:
            for _n, p in procs:
                p.terminate()
                assert p.wait(timeout=10) == 0  # SIGTERM: it closes its files and exits cleanly
        assert [(e["event"], e["via"]) for e in r0] == [("add", "d0"), ("del", "d0")]
        assert [e["event"] for e in r1] == ["add"]
        assert all(before - 0.01 <= e["ts"] <= after + 0.5 for e in r0 + r1)
        assert r0[0]["ts"] <= r0[1]["ts"]
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], check=False)

"""Controller threads entering a node's network namespace (hpnlab.node.nsenter) instead of starting a process
there: sysctls written from a thread land in that namespace only, and a bad key names itself."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from hpnlab.node import nsenter


@pytest.fixture
def netns():
    if os.geteuid() != 0:
        print("SKIP: needs root for a network namespace", file=sys.stderr)
        pytest.skip("needs root for a network namespace")
    name = f"hpnt-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield nsenter.NETNS_DIR / name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


def test_sysctls_written_from_a_thread_land_in_the_node_only(netns):
    key = "net.ipv4.conf.lo.rp_filter"
    ours = Path("/proc/sys/net/ipv4/conf/lo/rp_filter").read_text().strip()
    before = nsenter.read_sysctls(netns, [key, "net.ipv4.ip_forward"])
    want = {key: 2 if before[0] != "2" else 1, "net.ipv4.ip_forward": 1 - int(before[1])}
    nsenter.write_sysctls(netns, want)
    assert nsenter.read_sysctls(netns, list(want)) == [str(v) for v in want.values()]
    assert Path("/proc/sys/net/ipv4/conf/lo/rp_filter").read_text().strip() == ours  # this thread is back home
    r = subprocess.run(["ip", "netns", "exec", netns.name, "sysctl", "-n", key], capture_output=True, text=True)
    assert r.stdout.strip() == str(want[key])


def test_a_key_the_node_lacks_is_named(netns):
    with pytest.raises(OSError) as e:
        nsenter.write_sysctls(netns, {"net.ipv4.conf.nosuch0.rp_filter": 0})
    assert e.value.filename == "net.ipv4.conf.nosuch0.rp_filter"

"""On a real lab: the workload's sockets run the congestion control the experiment asked for (cubic by
default), whatever the kernel's default (bbr on this project's machine): seen from outside with `ss -ti`
in a host's namespace during the run, and in results.json per variant, with the run's provenance."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.lib.labs import _need_lab_machine, leftovers

pytestmark = pytest.mark.root
ALGORITHMS = {"cubic", "bbr", "reno", "htcp", "dctcp", "vegas", "westwood", "bic", "highspeed", "illinois"}


def _ss_algorithms(ns: str, port: int) -> set[str]:
    """The congestion control of every established TCP connection to or from ``port`` in namespace ns."""
    out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-tin", "state", "established",
                          f"( sport = :{port} or dport = :{port} )"], capture_output=True, text=True).stdout
    seen = set()
    for line in out.splitlines():
        if line[:1].isspace():  # a connection's info line: "cubic wscale:7,7 rto:201 ..."
            seen |= set(re.findall(r"[a-z_]+", line.split(" rto:")[0])) & ALGORITHMS
    return seen


def test_workload_sockets_run_cubic_and_results_say_so(tmp_path):
    _need_lab_machine()
    exp = tmp_path / "cc.yml"
    exp.write_text(f"""name: cc-check
spec: {ROOT / 'examples' / 'default.yml'}
duration: 6
repetitions: 1
lab_prefix: ccl
probes: [{{name: up, src: s0h0, dst: s1h0, flows: 4, rate: 100}}]
workload: {{kind: allreduce, size_kb: 256, connections: 2}}
variants:
  - {{name: allreduce, spec: {{tier2: clos}}}}
  - {{name: iperf3-reno, spec: {{tier2: clos}}, workload: {{kind: iperf3, src: s0h0, dst: s1h0, streams: 2,
     congestion: reno}}}}
""")
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "hpnlab.cli", "run", str(exp), "--out", str(out)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[str] = set()
    deadline = time.monotonic() + 300
    while p.poll() is None and time.monotonic() < deadline:
        seen |= _ss_algorithms("ccl0-s0h0", 17000)  # the all-reduce's ring port
        time.sleep(0.2)
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 0, stderr[-3000:]
    print(stdout)
    assert seen == {"cubic"}, f"ss -ti saw {seen or 'no all-reduce connection'} in ccl0-s0h0"
    res = json.loads((out / "results.json").read_text())
    ar, ip = res["variants"]["allreduce"], res["variants"]["iperf3-reno"]
    assert not ar.get("error") and not ip.get("error"), (ar.get("error"), ip.get("error"))
    assert ar["congestion"] == {"requested": "cubic", "ran": ["cubic"]}
    assert ar["runs"][0]["workload"]["congestion"] == "cubic"
    assert ip["congestion"] == {"requested": "reno", "ran": ["reno"]}, ip["runs"][0]["workload"].get("error")
    prov = res["provenance"]
    assert prov["congestion"] == {"allreduce": ["cubic"], "iperf3-reno": ["reno"]}
    assert prov["host_driver"] == {n: v["host_driver"] for n, v in res["variants"].items()}
    assert prov["kernel"] == ar["kernel"] and prov["frr"] != "unknown" and prov["cores"]["online"] >= 1
    assert prov["kernel_tcp_default"] == open("/proc/sys/net/ipv4/tcp_congestion_control").read().strip()
    assert leftovers("ccl0") == [] and leftovers("ccl1") == []

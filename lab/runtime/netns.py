"""The embedded runtime: one network namespace per node, veth pairs straight between them
(never a bridge: a Linux bridge drops LACPDUs), FRR daemons per router namespace, agents as processes.

Everything it creates is named ``<lab>-<node>`` or lives under /run/hpnlab/<lab> and
/var/run/frr/<lab>-<node>, and is recorded in state.json before it is created.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lab import nodesetup
from lab.errors import RuntimeFailure
from lab.runtime.base import FRR_DAEMONS, Progress, Runtime, kill_pids, load_nodes, run

FRR_BIN = Path("/usr/lib/frr")
FRR_RUN = Path("/var/run/frr")


IFINDEX_BASE = 1000


def link_batch(lab: str, links: list[dict]) -> list[str]:
    """One ``ip -batch`` line per veth pair, both ends born in their node namespaces with their MACs.

    Each end gets its own lab-wide ifindex. Left to the kernel, both ends of a pair often get the same
    number in their own namespaces (2 and 2), and then the kernel's linkwatch takes a veth for a device
    without a lower link and batches its carrier-down events up to a second: a ToR (and zebra, and the
    FIB's linkdown flag) learnt of a flapping host link half a second late.
    """
    return [f"link add {lk['a']['iface']} netns {lab}-{lk['a']['node']} index {IFINDEX_BASE + 2 * i} "
            f"address {lk['a']['mac']} type veth peer name {lk['b']['iface']} netns {lab}-{lk['b']['node']} "
            f"index {IFINDEX_BASE + 2 * i + 1} address {lk['b']['mac']}"
            for i, lk in enumerate(links)]


class NetnsRuntime(Runtime):
    name = "netns"

    def netns(self, node: str) -> str:
        return f"{self.lab}-{node}"

    def frr_dir(self, node: str) -> Path:
        return FRR_RUN / self.netns(node)

    def vtysh_argv(self, node: str, commands: list[str], tty: bool = False) -> list[str]:
        argv = ["vtysh", "--vty_socket", str(self.frr_dir(node))]
        for c in commands:
            argv += ["-c", c]
        return argv

    # --- deploy ------------------------------------------------------------------------------------
    def deploy(self, config_dir: Path, progress: Progress) -> None:
        topo, cfgs = load_nodes(config_dir)
        st = self.state
        taken = set(run(["ip", "netns", "list"], check=False).stdout.split()) & {self.netns(n) for n in cfgs}
        if taken:  # never adopt (and later delete) a namespace this lab did not create
            raise RuntimeFailure(f"network namespace '{sorted(taken)[0]}' already exists and is not this lab's: "
                                 f"remove it or choose another lab name")
        st.data.update({"runtime": self.name, "config": str(config_dir), "started": time.time()})
        requested = next((c.get("driver", "auto") for c in cfgs.values() if c["role"] == "host"), "auto")
        self.driver = nodesetup.host_driver(requested, nodesetup.bonding_available())
        st.data["host_driver"] = self.driver
        st.data["netns"] = [self.netns(n) for n in cfgs]  # recorded before creation: down removes what exists
        st.save()
        progress(f"creating {len(cfgs)} namespaces")
        run(["ip", "-batch", "-"], input="".join(f"netns add {self.netns(n)}\n" for n in cfgs),
            what="creating namespaces")
        progress(f"creating {len(topo['links'])} veth links")
        run(["ip", "-batch", "-"], input="\n".join(link_batch(self.lab, topo["links"])) + "\n",
            what="creating veth links", timeout=300)
        progress("configuring nodes (sysctls, addresses, nftables)")
        with ThreadPoolExecutor(max_workers=8) as ex:
            list(ex.map(lambda kv: self.configure_node(*kv, self.driver), cfgs.items()))
        routers = [n for n, c in cfgs.items() if c["role"] != "host"]
        progress(f"starting FRR on {len(routers)} routers")
        self._start_frr(routers, bfd=any(cfgs[n]["bfd"] for n in routers))
        # With kernel bonds the hosts need no agent: the bond speaks LACP and owns the routes.
        agents = [n for n, c in cfgs.items() if nodesetup.agent_module(c)
                  and not (c["role"] == "host" and self.driver == "bond")]
        progress(f"starting {len(agents)} agents")
        for n in agents:
            self.start_agent(n, cfgs[n])

    def _start_frr(self, routers: list[str], bfd: bool) -> None:
        config_dir = self.config_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        shutil.chown(self.log_dir, "frr", "frr")
        self.state.data["frr_dirs"] = [str(self.frr_dir(n)) for n in routers]  # recorded once, before creation
        self.state.save()
        for n in routers:
            d = self.frr_dir(n)
            d.mkdir(parents=True, exist_ok=True)
            shutil.chown(d, "frr", "frr")
        os.chmod(self.state.dir, 0o755)
        for daemon in FRR_DAEMONS:
            if daemon == "bfdd" and not bfd:
                continue
            procs = []
            for n in routers:
                ns = self.netns(n)
                argv = [str(FRR_BIN / daemon), "-N", ns, "-d", "-P", "0", "-f", str(config_dir / n / "frr.conf"),
                        "--log", f"file:{self.log_dir / f'{n}.{daemon}.log'}", "-i", str(self.frr_dir(n) / f"{daemon}.pid")]
                if daemon == "zebra":
                    argv += ["-F", "datacenter", "-s", "90000000"]
                procs.append((n, subprocess.Popen(self.exec_argv(n, argv), stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.PIPE, text=True)))
            for n, p in procs:
                _, err = p.communicate(timeout=60)
                if p.returncode != 0:
                    raise RuntimeFailure(f"{n}: {daemon} failed to start (exit {p.returncode}): "
                                         f"{(err or '').strip().splitlines()[-1:] or 'see ' + str(self.log_dir)}")
            if daemon == "zebra":  # the other daemons connect to zebra's socket; wait for it
                deadline = time.monotonic() + 20
                while not all((self.frr_dir(n) / "zserv.api").exists() for n in routers):
                    if time.monotonic() > deadline:
                        raise RuntimeFailure("zebra did not open its socket within 20 s; see " + str(self.log_dir))
                    time.sleep(0.05)

    def start_agent(self, node: str, cfg: dict) -> int:
        self.status_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", nodesetup.agent_module(cfg), str(self.config_dir / node / "node.json"),
                "--status", str(self.status_path(node))]
        log = open(self.agent_log(node), "a")
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        p = subprocess.Popen(self.exec_argv(node, argv), stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        log.close()
        agents = self.state.data.setdefault("agents", {})
        agents[node] = p.pid
        self.state.save()
        return p.pid

    # --- teardown ----------------------------------------------------------------------------------
    def frr_pids(self) -> dict[int, str]:
        out = {}
        for d in self.state.data.get("frr_dirs", []):
            for pf in Path(d).glob("*.pid"):
                try:
                    out[int(pf.read_text().strip())] = Path(d).name
                except (OSError, ValueError):
                    pass
        return out

    def destroy(self, progress: Progress) -> None:
        agents = {int(pid): (lambda c: any("lab.agents." in a for a in c)) for pid in
                  self.state.data.get("agents", {}).values()}
        if agents:
            progress(f"stopping {len(agents)} agents")
            kill_pids(agents)
        frr = self.frr_pids()
        if frr:
            progress(f"stopping {len(frr)} FRR daemons")
            kill_pids({pid: (lambda c, ns=ns: bool(c) and c[0].startswith(str(FRR_BIN)) and ns in c)
                       for pid, ns in frr.items()})
        existing = set(run(["ip", "netns", "list"], check=False).stdout.split())
        mine = [ns for ns in self.state.data.get("netns", []) if ns in existing]
        # Anything still running inside our own namespaces was started by this lab (probes, shells).
        left: dict[int, object] = {}
        for ns in mine:
            for pid in run(["ip", "netns", "pids", ns], check=False).stdout.split():
                left[int(pid)] = lambda c: True
        if left:
            progress(f"stopping {len(left)} leftover processes in the lab's namespaces")
            kill_pids(left, timeout=2)
        if mine:
            progress(f"deleting {len(mine)} namespaces")
            run(["ip", "-force", "-batch", "-"], input="".join(f"netns del {ns}\n" for ns in mine), check=False)
        for d in self.state.data.get("frr_dirs", []):
            shutil.rmtree(d, ignore_errors=True)
        self.remove_state()

"""The embedded runtime: one network namespace per node, veth pairs straight between them
(never a bridge: a Linux bridge drops LACPDUs), FRR daemons per router namespace, agents as processes.

Everything it creates is named ``<lab>-<node>`` or lives under /run/hpnlab/<lab> and
/var/run/frr/<lab>-<node>, and is recorded in state.json before it is created.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from hpnlab.generate import frr
from hpnlab.machine import nodesetup
from hpnlab.errors import RuntimeFailure
from hpnlab.model.models import NodeConfig
from hpnlab.node.plan import MTU
from hpnlab.machine.proc import is_node_process, kill_pids, pid_alive, processes, run
from hpnlab.machine.progress import Report
from hpnlab.runtime.base import Runtime, list_netns, netns_members, register
from hpnlab.machine.signals import shielded

IFINDEX_BASE = 1000
TOOLS = (("ip", "iproute2"), ("tc", "iproute2"), ("nft", "nftables"), ("sysctl", "procps"), ("ping", "iputils-ping"))


def link_batch(lab: str, links: list[dict]) -> list[str]:
    """One ``ip -batch`` line per veth pair, both ends born in their node namespaces with their MACs.

    Each end gets its own lab-wide ifindex. Left to the kernel, both ends of a pair often get the same
    number in their own namespaces (2 and 2), and then the kernel's linkwatch takes a veth for a device
    without a lower link and batches its carrier-down events up to a second: a ToR (and zebra, and the
    FIB's linkdown flag) learnt of a flapping host link half a second late.
    """
    return [f"link add {lk['a']['iface']} netns {lab}-{lk['a']['node']} index {IFINDEX_BASE + 2 * i} "
            f"address {lk['a']['mac']} mtu {MTU} type veth peer name {lk['b']['iface']} netns {lab}-{lk['b']['node']} "
            f"index {IFINDEX_BASE + 2 * i + 1} address {lk['b']['mac']} mtu {MTU}"
            for i, lk in enumerate(links)]


def need_tools(tools=TOOLS) -> None:
    for tool, pkg in tools:
        if not shutil.which(tool):
            raise RuntimeFailure(f"'{tool}' not found: install Debian's {pkg} (sudo ./bootstrap install)")


@register
class NetnsRuntime(Runtime):
    name = "netns"

    @classmethod
    def preflight(cls, spec) -> None:
        need_tools()
        frr.preflight()  # what the kernel offers is checked for every runtime on this machine (hpnlab.machine.kernel)

    def netns(self, node: str) -> str:
        return f"{self.lab}-{node}"

    def refuse_foreign(self, nodes: list[str]) -> None:
        """Neither a namespace nor an FRR directory of a node's name may exist already: the lab would
        adopt it, and later delete it with whatever it holds."""
        super().refuse_foreign(nodes)
        taken = [str(self.frr_dir(n)) for n in nodes if self.frr_dir(n).exists()]
        if taken:
            raise RuntimeFailure(f"'{taken[0]}' already exists and is not this lab's: remove it (or "
                                 f"'hpnlab down --lab {self.lab}' if a crashed lab of this name left it), "
                                 f"or choose another lab name")

    def frr_dir(self, node: str) -> Path:
        return frr.RUN / self.netns(node)

    def vtysh_argv(self, node: str, commands: list[str], tty: bool = False) -> list[str]:
        return frr.vtysh_argv(self.frr_dir(node), commands)

    def vty_socket(self, node: str, daemon: str) -> Path:
        return self.frr_dir(node) / f"{daemon}.vty"

    # --- deploy ------------------------------------------------------------------------------------
    def create_nodes(self, topo: dict, cfgs: dict[str, NodeConfig], progress: Report) -> None:
        progress(f"creating {len(cfgs)} namespaces")
        run(["ip", "-batch", "-"], input="".join(f"netns add {self.netns(n)}\n" for n in cfgs),
            what="creating namespaces")
        progress(f"creating {len(topo['links'])} veth links")
        run(["ip", "-batch", "-"], input="\n".join(link_batch(self.lab, topo["links"])) + "\n",
            what="creating veth links", timeout=300)

    def start_frr(self, routers: list[str], cfgs: dict[str, NodeConfig], daemons=frr.DAEMONS) -> None:
        if "zebra" in daemons:  # the first call: each router's pathspace, recorded once, before creation
            self.prepare_frr_dirs(routers)
        launching: list[subprocess.Popen] = []
        try:
            self._launch_frr(routers, cfgs, launching, daemons)
            # Recorded too: a daemon that exits by itself removes its pid file; destroy still finds it by these.
            self.state.data.frr_pids.update({f"{Path(d).name[len(self.lab) + 1:]}/{daemon}": pid
                                             for pid, daemon, d in self.frr_daemons()})
            self.state.save()
        except BaseException:
            # Interrupted while launchers run: let each finish daemonising, so every daemon is inside its
            # namespace (where the rollback finds it) rather than forked after the rollback looked.
            with shielded("rolling back"):
                for p in launching:
                    try:
                        p.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        p.kill()
            raise

    def prepare_frr_dirs(self, routers: list[str]) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        shutil.chown(self.log_dir, "frr", "frr")
        self.state.data.frr_dirs = [str(self.frr_dir(n)) for n in routers]
        self.state.save()
        for n in routers:
            d = self.frr_dir(n)
            d.mkdir(parents=True, exist_ok=True)
            shutil.chown(d, "frr", "frr")
            frr.write_vtysh_conf(d)
            for p in (self.config_dir / n, self.config_dir / n / "frr.conf"):  # 'write file' lands here
                shutil.chown(p, "frr", "frr")
        os.chmod(self.state.dir, 0o755)

    def _launch_frr(self, routers: list[str], cfgs: dict[str, NodeConfig], launching: list, daemons) -> None:
        for daemon in [d for d in frr.DAEMONS if d in daemons]:  # each daemon on every router at once, in order
            procs = []
            for n in routers:
                if daemon not in frr.daemons(cfgs[n].bfd):
                    continue
                argv = frr.launch_argv(daemon, self.netns(n), self.config_dir / n / "frr.conf",
                                       self.log_dir / f"{n}.{daemon}.log", self.frr_dir(n) / f"{daemon}.pid")
                procs.append((n, subprocess.Popen(self.exec_argv(n, argv), stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.PIPE, text=True)))
                launching.append(procs[-1][1])
                # `ip netns exec` execs the daemon: this PID is the one FRR names its crash-log directory after
                self.state.data.frr_launch_pids[f"{n}/{daemon}"] = procs[-1][1].pid
            self.state.save()  # before waiting: a teardown after a kill here still finds those directories
            for n, p in procs:
                _, err = p.communicate(timeout=60)
                if p.returncode != 0:
                    raise RuntimeFailure(f"{n}: {daemon} failed to start (exit {p.returncode}): "
                                         f"{(err or '').strip().splitlines()[-1:] or 'see ' + str(self.log_dir)}")
            if daemon == "zebra":  # the other daemons connect to zebra's socket; wait for it
                deadline = time.monotonic() + 20
                while not all(frr.zebra_ready(self.frr_dir(n)) for n in routers):
                    if time.monotonic() > deadline:
                        raise RuntimeFailure("zebra did not open its socket within 20 s; see " + str(self.log_dir))
                    time.sleep(0.05)

    def start_agents(self, nodes: list[str], cfgs: dict[str, NodeConfig]) -> None:
        """Every agent forked from one pre-loaded launcher (hpnlab.node.agents.launcher: no Python start per agent)
        into its node's namespace (as ``ip netns exec NS python -m MODULE NODE_JSON --status FILE`` would run
        it), its output appended to the node's agent log."""
        if not nodes:
            return
        self.status_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        driver = self.state.data.host_driver or "userspace"
        launcher = subprocess.Popen([sys.executable, "-m", "hpnlab.node.agents.launcher", str(self.config_dir)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True)
        try:
            for n in nodes:
                req = {"netns": self.netns(n), "module": nodesetup.agent_module(cfgs[n].plain(), driver),
                       "argv": [str(self.config_dir / n / "node.json"), "--status", str(self.status_path(n))],
                       "log": str(self.agent_log(n)), "name": n}
                launcher.stdin.write(json.dumps(req) + "\n")
                launcher.stdin.flush()
                reply = json.loads(launcher.stdout.readline() or '{"error": "the launcher exited"}')
                if "pid" not in reply:
                    raise RuntimeFailure(f"{n}: starting its agent failed ({reply.get('error')})")
                self.state.data.agents[n] = reply["pid"]
                self.state.save()
        except (BrokenPipeError, ValueError) as e:
            raise RuntimeFailure(f"the agent launcher failed ({e})") from None
        finally:
            try:
                launcher.stdin.close()
            except BrokenPipeError:
                pass
            try:
                launcher.wait(timeout=10)
            except subprocess.TimeoutExpired:
                launcher.kill()
                launcher.wait()
            err = (launcher.stderr.read() or "").strip()
            if launcher.returncode and err:
                raise RuntimeFailure(f"the agent launcher failed (exit {launcher.returncode}): {err.splitlines()[-1]}")

    # --- teardown ----------------------------------------------------------------------------------
    def frr_daemons(self) -> list[tuple[int, str, str]]:
        """(pid, daemon, pathspace) of every FRR daemon the lab started: its pid files, and the PIDs
        recorded when FRR started (a daemon that exited by itself has removed its pid file)."""
        out = {(node, daemon): pid for key, pid in self.state.data.frr_pids.items()
               for node, daemon in [key.split("/", 1)]}
        for d in self.state.data.frr_dirs:
            for pf in Path(d).glob("*.pid"):
                try:
                    out[(Path(d).name[len(self.lab) + 1:], pf.stem)] = int(pf.read_text().strip())
                except (OSError, ValueError):
                    pass
        return [(pid, daemon, self.netns(node)) for (node, daemon), pid in out.items()]

    def frr_pids(self) -> dict[int, str]:
        return {pid: ns for pid, _d, ns in self.frr_daemons()}

    def orphans(self) -> list[int]:
        """Processes of this lab that no namespace or pid file leads to any more (e.g. a daemon that forked
        after an earlier, killed teardown looked): FRR daemons whose pathspace is ``<lab>-<node>`` and
        agents or tools reading files under this lab's state directory. Lab names have no '-', so no
        other lab's process matches."""
        mine = f"{self.lab}-"
        state = f"{self.state.dir}/"
        out = []
        for pid, argv in processes().items():
            if frr.is_daemon(argv) and "-N" in argv[:-1] and argv[argv.index("-N") + 1].startswith(mine):
                out.append(pid)
            elif is_node_process(argv) and any(a.startswith(state) for a in argv):
                out.append(pid)
        return out

    def destroy(self, progress: Report) -> None:
        """Stop every process of the lab at once, then delete the namespaces in one batch.

        SIGKILL, not SIGTERM: everything a lab process could still do on a clean exit (zebra removing its
        routes, bgpd notifying its peers, a ToR agent withdrawing its /32s) dies with the namespaces
        anyway, and the graceful path took ~0.6 s. Only PIDs the lab recorded or that run inside its own
        namespaces are signalled, and the call returns when every thread of them is gone."""
        existing = set(list_netns())
        mine = [ns for ns in self.state.data.netns if ns in existing]
        daemons = self.frr_daemons()
        recorded = {pid: is_node_process for pid in self.state.data.agents.values()}
        recorded.update({pid: (lambda c, ns=ns: frr.is_daemon(c, ns)) for pid, _d, ns in daemons})
        recorded.update({pid: (lambda c: True) for pid in self.orphans()})
        for sweep in range(5):  # again until the namespaces are empty: a daemon may fork while we kill
            procs: dict[int, object] = dict(recorded) if sweep == 0 else {}
            # whatever runs inside our own namespaces was started by this lab (probes, shells)
            procs.update({pid: (lambda c: True) for pid in netns_members(mine)})
            procs = {p: m for p, m in procs.items() if p != os.getpid() and pid_alive(p)}
            if not procs:
                break
            if sweep == 0:
                progress(f"stopping {len(procs)} processes ({len(self.state.data.agents)} agents, "
                         f"{len(daemons)} FRR daemons)")
            kill_pids(procs, hard=True)
        if mine:
            progress(f"deleting {len(mine)} namespaces")
            run(["ip", "-force", "-batch", "-"], input="".join(f"netns del {ns}\n" for ns in mine), check=False)
        for d in self.state.data.frr_dirs:
            shutil.rmtree(d, ignore_errors=True)
        # FRR's crash-log directory of each daemon killed (a clean exit removes its own): named after the PID
        # the daemon started under, before it forked, not the daemon's own PID. One of that name made before
        # this lab started is a dead process's (FRR does not reuse it) and is left alone.
        for key, pid in self.state.data.frr_launch_pids.items():
            d = frr.TMP / f"{key.split('/', 1)[1]}.{pid}"
            try:
                if d.stat().st_ctime >= (self.state.data.started or 0) - 1:
                    shutil.rmtree(d, ignore_errors=True)
            except OSError:
                pass
        self.remove_state()

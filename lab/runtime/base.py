"""The one small runtime interface: every runtime ends in "a network namespace per node plus a way
to run a process in it". Agents, verify, faults and probes use only this, so they work on every runtime.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

from lab.errors import RuntimeFailure

STATE_ROOT = Path(os.environ.get("HPNLAB_STATE_ROOT", "/run/hpnlab"))
Progress = Callable[[str], None]
FRR_DAEMONS = ("zebra", "staticd", "bgpd", "bfdd")  # what every router runs (bfdd only with BFD on)


def load_nodes(config_dir: Path) -> tuple[dict, dict[str, dict]]:
    """A rendered lab: topology.json and every node's node.json."""
    topo = json.loads((config_dir / "topology.json").read_text())
    cfgs = {n["name"]: json.loads((config_dir / n["name"] / "node.json").read_text()) for n in topo["nodes"]}
    return topo, cfgs


def state_dir(lab: str) -> Path:
    return STATE_ROOT / lab


def running_labs() -> list[str]:
    if not STATE_ROOT.exists():
        return []
    return sorted(p.name for p in STATE_ROOT.iterdir() if (p / "state.json").exists())


class State:
    """state.json, rewritten after every step of a deploy so `down` can undo a crashed `up`."""

    def __init__(self, lab: str):
        self.dir = state_dir(lab)
        self.path = self.dir / "state.json"
        self.data: dict = {"lab": lab}
        if self.path.exists():
            try:
                self.data = json.loads(self.path.read_text())
            except (OSError, ValueError):
                pass

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        os.replace(tmp, self.path)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def kill_pids(pids: dict[int, Callable[[list[str]], bool]], timeout: float = 5.0) -> list[int]:
    """SIGTERM each PID whose cmdline the matcher recognises (never a recycled PID), then SIGKILL stragglers."""
    ours = [pid for pid, match in pids.items() if pid_alive(pid) and match(cmdline(pid))]
    for pid in ours:
        try:
            os.kill(pid, signal.SIGCONT)  # a hung-node fault may have stopped it; SIGTERM waits otherwise
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(p) for p in ours):
        time.sleep(0.05)
    for pid in ours:
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for pid in ours:  # reap our own children so no zombie is left
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    return ours


def run(argv: list[str], *, input: str | None = None, timeout: float = 60, check: bool = True,
        what: str | None = None) -> subprocess.CompletedProcess:
    """Run without a shell; a failure raises one line naming the step and the tool's own message."""
    try:
        r = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise RuntimeFailure(f"{what or argv[0]}: '{argv[0]}' not found") from None
    except subprocess.TimeoutExpired:
        raise RuntimeFailure(f"{what or argv[0]}: timed out after {timeout:g} s") from None
    if check and r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        raise RuntimeFailure(f"{what or ' '.join(argv[:4])}: exit {r.returncode}: {msg[-1] if msg else ''}")
    return r


class Runtime:
    """Base of the runtimes. Subclasses create and remove the nodes; the rest is shared."""

    name = "base"

    def __init__(self, lab: str):
        self.lab = lab
        self.state = State(lab)

    # --- what subclasses provide ------------------------------------------------------------
    def netns(self, node: str) -> str:
        raise NotImplementedError

    def deploy(self, config_dir: Path, progress: Progress) -> None:
        raise NotImplementedError

    def destroy(self, progress: Progress) -> None:
        raise NotImplementedError

    def vtysh_argv(self, node: str, commands: list[str], tty: bool = False) -> list[str]:
        raise NotImplementedError

    def frr_pids(self) -> dict[int, str]:
        """Running FRR daemons: pid -> the namespace they serve (for `status`)."""
        raise NotImplementedError

    def agent_pid(self, node: str) -> int | None:
        pid = self.state.data.get("agents", {}).get(node)
        return int(pid) if pid is not None else None

    def status_path(self, node: str) -> Path:
        """The agent's heartbeat/status file as seen from this machine."""
        return self.status_dir / f"{node}.json"

    def agent_log(self, node: str) -> Path:
        return self.log_dir / f"{node}.agent.log"

    def log_files(self) -> dict[str, Path]:
        """The lab's logs (agents, FRR) by file name, for keeping beside experiment results."""
        return {p.name: p for p in sorted(self.log_dir.glob("*.log"))}

    def shell_argv(self, node: str, shell: str) -> list[str]:
        return self.exec_argv(node, [shell])

    def inspect(self) -> dict[str, dict] | None:
        """node -> {"state", ...} as the container engine reports it; None where nodes are not containers."""
        return None

    # --- shared ------------------------------------------------------------------------------
    def exec_argv(self, node: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns(node), *argv]

    def run(self, node: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
        kw.setdefault("what", f"{node}: {argv[0]}")
        return run(self.exec_argv(node, argv), **kw)

    def vtysh_json(self, node: str, command: str, timeout: float = 20) -> dict | list | None:
        r = run(self.vtysh_argv(node, [command]), timeout=timeout, check=False)
        if r.returncode != 0:
            return None
        try:
            return json.loads(r.stdout or "null")
        except ValueError:
            return None

    def configure_node(self, node: str, cfg: dict, driver: str) -> None:
        """The same plan on every runtime: sysctls, addresses/bonds, nftables, applied from outside
        through the node's namespace (so a container needs no tools or capabilities for it)."""
        from lab import nodesetup

        ctl = [f"{k}={v}" for k, v in nodesetup.sysctls(cfg).items()]
        self.run(node, ["sysctl", "-q", "-w", *ctl], what=f"{node}: sysctl")
        run(["ip", "-n", self.netns(node), "-batch", "-"],
            input="\n".join(nodesetup.ip_batch(cfg, driver)) + "\n", what=f"{node}: addresses")
        rules = nodesetup.nft_ruleset(cfg, driver)
        if rules:
            self.run(node, ["nft", "-f", "-"], input=rules, what=f"{node}: nftables ARP duplication")

    def netns_pids(self, node: str) -> list[int]:
        r = run(["ip", "netns", "pids", self.netns(node)], check=False)
        return [int(p) for p in r.stdout.split() if p.isdigit()]

    @property
    def config_dir(self) -> Path:
        return self.state.dir / "config"

    @property
    def status_dir(self) -> Path:
        return self.state.dir / "status"

    @property
    def log_dir(self) -> Path:
        return self.state.dir / "logs"

    def remove_state(self) -> None:
        shutil.rmtree(self.state.dir, ignore_errors=True)

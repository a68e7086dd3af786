"""The containerlab runtime: containerlab creates the containers and veths from the generated
``<lab>.clab.yml``, and each container configures itself from its bound node.json (the image's init runs
hpnlab.node.agents.boot: the same plan as the namespace runtime's, then FRR and the agent), so this runtime only
deploys and waits. Faults, probes and vtysh reach the nodes through their namespaces (containerlab links
them as /run/netns/clab-<lab>-<node>) and ``docker exec``.

containerlab and docker are only ever called here, through subprocess without a shell, with timeouts,
and their own error line is shown when they fail.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from hpnlab.runtime import containers
from hpnlab.generate import frr
from hpnlab.errors import RuntimeFailure
from hpnlab.model.models import NodeConfig
from hpnlab.machine.proc import cmdline, is_node_process, kill_pids, run
from hpnlab.machine.progress import Report
from hpnlab.runtime.base import Runtime, list_netns, netns_members, register
from hpnlab.runtime.netns import need_tools

CLAB = "containerlab"
DOCKER = "docker"
DESTROY_TIMEOUT = 300.0
INSPECT_TIMEOUT = 60.0
# Inside the containers (see templates/clab and docker/): where a node's run directory is bound.
INSTALL = "install it (https://containerlab.dev/install/: bash -c \"$(curl -sL https://get.containerlab.dev)\")"
NETNS_HINT = "or use '--runtime netns', which needs no Docker"


def deploy_timeout() -> float:
    """Seconds containerlab deploy may take (HPNLAB_CLAB_TIMEOUT; large labs pull and start many containers)."""
    try:
        return float(os.environ.get("HPNLAB_CLAB_TIMEOUT", "600"))
    except ValueError:
        raise RuntimeFailure("HPNLAB_CLAB_TIMEOUT must be a number of seconds, e.g. 600") from None


def preflight() -> None:
    """Everything the clab runtime calls, checked before anything is created."""
    if not shutil.which(CLAB):
        raise RuntimeFailure(f"containerlab not found: {INSTALL}, {NETNS_HINT}")
    need_tools((("ip", "iproute2"), ("nft", "nftables"), ("sysctl", "procps")))
    containers.need_docker(f", {NETNS_HINT}")
    for role, image in containers.IMAGES.items():
        if not containers.image_exists(image):
            raise RuntimeFailure(f"{role} image '{image}' not found: build it with 'hpnlab images build'")


def container(lab: str, node: str) -> str:
    """containerlab's default name for a node's container, and for its namespace link."""
    return f"clab-{lab}-{node}"


def parse_inspect(text: str, lab: str) -> dict[str, dict]:
    """``containerlab inspect --format json`` -> node -> its container row.

    Accepts every shape containerlab has printed: a bare list (early releases), ``{"containers": [...]}``
    (up to 0.5x) and ``{"<lab>": [...]}`` (later). Anything else is an error naming what was wrong.
    """
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as e:
        raise RuntimeFailure(f"containerlab inspect printed no valid JSON ({e}): check 'containerlab version' "
                             f"(hpnlab reads the JSON of containerlab 0.x releases)") from None
    if isinstance(data, list):
        rows = data
    elif isinstance(data, dict) and "containers" in data:
        rows = data["containers"]
    elif isinstance(data, dict) and all(isinstance(v, list) for v in data.values()):
        rows = [r for v in data.values() for r in v]  # {"<lab>": [...]}, one key per lab
    else:
        raise RuntimeFailure("containerlab inspect JSON has neither a 'containers' list nor lab-name keys")
    if rows is None:
        rows = []
    if not isinstance(rows, list):
        raise RuntimeFailure("containerlab inspect JSON: the container list is not a list")
    prefix = container(lab, "")
    out: dict[str, dict] = {}
    for r in rows:
        if not isinstance(r, dict) or not isinstance(r.get("name"), str):
            raise RuntimeFailure("containerlab inspect JSON: a container entry has no 'name'")
        if r.get("lab_name", lab) != lab or not r["name"].startswith(prefix):
            continue  # another lab's container
        out[r["name"][len(prefix):]] = {"container": r["name"], "state": str(r.get("state", "?")),
                                        "image": r.get("image", ""), "id": r.get("container_id", "")}
    return out


@register
class ClabRuntime(Runtime):
    name = "clab"
    self_configuring = True

    @property
    def boot_timeout(self) -> float:
        return deploy_timeout()

    @classmethod
    def preflight(cls, spec) -> None:
        preflight()

    def netns(self, node: str) -> str:
        return container(self.lab, node)

    @property
    def topology_file(self) -> Path:
        return self.config_dir / f"{self.lab}.clab.yml"

    def node_run_dir(self, node: str) -> Path:
        return self.config_dir / node / "run"

    def status_path(self, node: str) -> Path:
        return self.node_run_dir(node) / "status.json"

    def agent_log(self, node: str) -> Path:
        return self.node_run_dir(node) / "agent.log"

    def log_files(self) -> dict[str, Path]:
        return {f"{p.parent.parent.name}.agent.log": p for p in sorted(self.config_dir.glob("*/run/agent.log"))}

    def docker_exec(self, node: str, argv: list[str], detach: bool = False, tty: bool = False) -> list[str]:
        flags = (["-d"] if detach else []) + (["-it"] if tty else [])
        return [DOCKER, "exec", *flags, container(self.lab, node), *argv]

    def vtysh_argv(self, node: str, commands: list[str], tty: bool = False) -> list[str]:
        return self.docker_exec(node, frr.vtysh_argv(None, commands), tty=tty)

    def shell_argv(self, node: str, shell: str) -> list[str]:
        return self.docker_exec(node, ["bash"], tty=True)

    def clab(self, *args: str, timeout: float, what: str, check: bool = True):
        return run([CLAB, *args, "-t", str(self.topology_file)], timeout=timeout, what=what, check=check)

    # --- deploy ------------------------------------------------------------------------------------
    def refuse_foreign(self, nodes: list[str]) -> None:
        """Never deploy over (and so later destroy) a containerlab lab of the same name we did not create."""
        super().refuse_foreign(nodes)
        r = run([DOCKER, "ps", "-a", "-q", "--filter", f"label=containerlab={self.lab}"], check=False,
                what="docker ps", timeout=60)
        if r.returncode == 0 and r.stdout.strip():
            raise RuntimeFailure(f"containers of a containerlab lab named '{self.lab}' already exist: "
                                 f"'containerlab destroy --name {self.lab}' or choose another lab name")

    def create_nodes(self, topo: dict, cfgs: dict[str, NodeConfig], progress: Report) -> None:
        self.state.data.clab_topology = str(self.topology_file)
        for n in cfgs:  # bound into the container: the agent's status and log land here
            self.node_run_dir(n).mkdir(parents=True, exist_ok=True)
        self.state.save()  # before containerlab runs: a failure from here on is undone by destroy
        timeout = deploy_timeout()
        progress(f"containerlab deploy: {len(cfgs)} containers, {len(topo['links'])} links (timeout {timeout:g} s)")
        self.clab("deploy", timeout=timeout, what="containerlab deploy")
        existing = set(list_netns())
        missing = [self.netns(n) for n in cfgs if self.netns(n) not in existing]
        if missing:
            raise RuntimeFailure(f"containerlab deploy returned but /run/netns/{missing[0]} is missing "
                                 f"({len(missing)} of {len(cfgs)} nodes)")

    def boot_path(self, node: str) -> Path:
        return self.node_run_dir(node) / "boot.json"

    def boot_state(self, node: str) -> dict | None:
        try:
            return json.loads(self.boot_path(node).read_text())
        except (OSError, ValueError):
            return None

    # --- what runs where -----------------------------------------------------------------------------
    def _pids_matching(self, node: str, match) -> list[int]:
        return [p for p in self.netns_pids(node) if match(cmdline(p))]

    def agent_pid(self, node: str) -> int | None:
        pids = self._pids_matching(node, is_node_process)
        return pids[0] if pids else None

    def frr_pids(self) -> dict[int, str]:
        out = {}
        for ns in self.state.data.netns:
            node = ns[len(container(self.lab, "")):]
            for p in self._pids_matching(node, frr.is_daemon):
                out[p] = ns
        return out

    def inspect(self) -> dict[str, dict] | None:
        r = self.clab("inspect", "--format", "json", timeout=INSPECT_TIMEOUT, what="containerlab inspect")
        return parse_inspect(r.stdout, self.lab)

    # --- teardown ----------------------------------------------------------------------------------
    def destroy(self, progress: Report) -> None:
        """Stop what hpnlab started from this machine inside the containers' namespaces (probes, route
        monitors: our PID namespace, unlike the containers' own processes), then let containerlab remove
        the containers, links and its lab directory. State is kept if containerlab fails, so
        ``hpnlab down`` can be retried."""
        existing = set(list_netns())
        own_pidns = os.readlink("/proc/self/ns/pid")
        ours: dict[int, object] = {}
        for p in netns_members([ns for ns in self.state.data.netns if ns in existing]):
            try:
                if os.readlink(f"/proc/{p}/ns/pid") == own_pidns and p != os.getpid():
                    ours[p] = lambda c: True
            except OSError:
                pass
        if ours:
            progress(f"stopping {len(ours)} processes hpnlab started in the lab's namespaces")
            kill_pids(ours, timeout=2)
        if self.state.data.clab_topology and self.topology_file.exists():
            if not shutil.which(CLAB):
                raise RuntimeFailure(f"containerlab not found, so the lab's containers cannot be removed: "
                                     f"{INSTALL}, then 'hpnlab down --lab {self.lab}'")
            progress("containerlab destroy --cleanup")
            try:
                self.clab("destroy", "--cleanup", timeout=DESTROY_TIMEOUT, what="containerlab destroy")
            except RuntimeFailure as e:
                raise RuntimeFailure(f"{e} (the lab's state is kept: fix this, then 'hpnlab down --lab {self.lab}')") \
                    from None
        self.remove_state()

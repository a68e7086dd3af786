"""The one small runtime interface and its lifecycle.

Every runtime ends in "a network namespace per node plus a way to run a process in it"; agents, verify,
faults and probes use only that, so they work on every runtime. A deploy is one plan, written once here:

    preflight -> create nodes -> configure (sysctls, addresses, nftables) -> zebra -> agents -> bgpd
    (-> agents that talk to FRR)

(a self-configuring runtime, whose node images run that plan themselves at start, waits instead)

and ``destroy`` undoes it. A runtime subclass provides only the steps that differ (how nodes are created
and removed, how FRR and an agent are started, how vtysh reaches a router), and registers itself with
``@register``: a new runtime is one file in this package, named like the runtime.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hpnlab.model import capacity
from hpnlab.generate import frr
from hpnlab.machine import kernel, neightable, nodesetup, vty
from hpnlab.errors import RuntimeFailure, SpecError, StateError
from hpnlab.model.models import LabState, NodeConfig, load_json_model
from hpnlab.machine.proc import run
from hpnlab.machine.progress import Report
from hpnlab.node import nsenter
from hpnlab.node.agents import solicit
from hpnlab.node.nsenter import NETNS_DIR
from hpnlab.runtime.channel import Channel, NetnsChannel
from hpnlab.model.spec import check_lab_name

STATE_ROOT = Path(os.environ.get("HPNLAB_STATE_ROOT", "/run/hpnlab"))
NEIGH_RECORD = neightable.RECORD  # the machine's record of raised neighbour limits (hpnlab.machine.neightable)
REGISTRY: dict[str, type["Runtime"]] = {}


def register(cls: type["Runtime"]) -> type["Runtime"]:
    REGISTRY[cls.name] = cls
    return cls


def state_dir(lab: str) -> Path:
    """/run/hpnlab/<lab>; the name is validated first, so it can never point anywhere else."""
    return STATE_ROOT / check_lab_name(lab, "--lab")


def running_labs() -> list[str]:
    if not STATE_ROOT.exists():
        return []
    out = []
    for p in STATE_ROOT.iterdir():
        try:
            check_lab_name(p.name)
        except SpecError:
            continue  # not ours
        if (p / "state.json").exists():
            out.append(p.name)
    return sorted(out)


def load_nodes(config_dir: Path) -> tuple[dict, dict[str, NodeConfig]]:
    """A rendered lab: topology.json and every node's node.json, each validated (the controller works on
    the typed NodeConfig; ``cfg.plain()`` is the JSON the node reads)."""
    fix = "the lab's files are damaged; 'hpnlab down' and 'hpnlab up' again"
    path = config_dir / "topology.json"
    try:
        topo = json.loads(path.read_text())
        names = [n["name"] for n in topo["nodes"]]
    except FileNotFoundError:
        raise StateError(f"{path} is missing: the lab is not running (or was removed)") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StateError(f"{path} is damaged ({e.__class__.__name__}): {fix}") from None
    cfgs = {n: load_json_model(NodeConfig, config_dir / n / "node.json", "node config", fix) for n in names}
    return topo, cfgs


class State:
    """A lab's state.json as a typed record (``.data``), saved atomically after every change."""

    def __init__(self, lab: str, data: LabState | None = None):
        self.lab = lab
        self.dir = state_dir(lab)
        self.path = self.dir / "state.json"
        self.data = data or LabState(lab=lab)

    @classmethod
    def load(cls, lab: str) -> "State":
        """The recorded state; a missing or damaged file is one line saying that ``down`` still cleans up."""
        fix = f"'hpnlab down --lab {lab}' removes the lab's objects by their names"
        data = load_json_model(LabState, state_dir(lab) / "state.json", f"lab '{lab}': state", fix)
        if data.lab != lab:
            raise StateError(f"lab '{lab}': state {state_dir(lab) / 'state.json'} belongs to lab '{data.lab}': {fix}")
        return cls(lab, data)

    def exists(self) -> bool:
        return self.path.exists()

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(self.data.model_dump_json(indent=1))
        os.replace(tmp, self.path)


class Runtime:
    """Base of the runtimes: the shared deploy plan and everything that only needs a node's namespace."""

    name = "base"
    self_configuring = False  # True: nodes configure themselves at start (container images)
    shares_kernel = True  # the nodes are namespaces of this machine's kernel (False: a cluster's nodes)
    channel: Channel = NetnsChannel()  # how a command reaches a node (runtime/channel.py)
    hold_ra = True  # a ToR's Router Advertisements held while the lab starts; deploy asks hpnlab.machine.kernel

    def __init__(self, lab: str, state: State | None = None):
        self.lab = lab
        self.state = state or State(lab)

    # --- what each runtime provides -------------------------------------------------------------------
    @classmethod
    def preflight(cls, spec) -> None:
        """Everything the runtime calls, checked before anything is created."""

    def netns(self, node: str) -> str:
        raise NotImplementedError

    def refuse_foreign(self, nodes: list[str]) -> None:
        """Never adopt (and later delete) a namespace this lab did not create."""
        taken = set(list_netns()) & {self.netns(n) for n in nodes}
        if taken:
            raise RuntimeFailure(f"network namespace '{sorted(taken)[0]}' already exists and is not this lab's: "
                                 f"remove it or choose another lab name")

    def create_nodes(self, topo: dict, cfgs: dict[str, NodeConfig], progress: Report) -> None:
        raise NotImplementedError

    def start_frr(self, routers: list[str], cfgs: dict[str, NodeConfig], daemons=frr.DAEMONS) -> None:
        """Start these FRR daemons (in frr.DAEMONS' order, those each router runs) on the routers."""
        raise NotImplementedError

    boot_poll = 0.2  # seconds between looks at the nodes' boot reports
    boot_timeout = 600.0

    def boot_state(self, node: str) -> dict | None:
        """Self-configuring runtimes: the node's boot.json (hpnlab.node.agents.boot), None before it exists."""
        raise NotImplementedError

    def wait_booted(self, nodes: list[str], progress: Report) -> None:
        """Until every node reports it configured itself; a node's error fails the deploy with its line,
        and the slowest node is named (with its current step) while waiting."""
        deadline = time.monotonic() + self.boot_timeout
        done: set[str] = set()
        last = 0.0
        while True:
            states = {n: self.boot_state(n) for n in nodes if n not in done}
            for n, s in states.items():
                if s and s.get("error"):
                    raise RuntimeFailure(f"{n}: configuring itself failed: {s['error']}")
                if s and s.get("done"):
                    done.add(n)
            late = [n for n in nodes if n not in done]
            if not late:
                progress(f"{len(nodes)} nodes configured themselves (addresses, capacity, FRR, agents)")
                return
            if time.monotonic() > deadline:
                raise RuntimeFailure(f"{len(late)} nodes did not finish configuring themselves within "
                                     f"{self.boot_timeout:g} s: {', '.join(late[:4])}")
            if time.monotonic() - last > 2:
                s = states.get(late[0]) or {}
                progress(f"waiting for {len(late)}/{len(nodes)} nodes to configure themselves; {late[0]}: "
                         f"{s.get('waiting') or (s.get('steps') or [{}])[-1].get('step') or 'not started'}")
                last = time.monotonic()
            time.sleep(self.boot_poll)

    def start_agents(self, nodes: list[str], cfgs: dict[str, NodeConfig]) -> None:
        """Start these nodes' agents (hpnlab.machine.nodesetup.agent_module says which), recording their PIDs."""
        raise NotImplementedError

    def destroy(self, progress: Report) -> None:
        raise NotImplementedError

    def vtysh_argv(self, node: str, commands: list[str], tty: bool = False) -> list[str]:
        raise NotImplementedError

    def frr_pids(self) -> dict[int, str]:
        """Running FRR daemons: pid -> the namespace they serve (for `status`)."""
        raise NotImplementedError

    def agent_pid(self, node: str) -> int | None:
        return self.state.data.agents.get(node)

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

    def extra_files(self, files: dict[str, str], topo) -> dict[str, str]:
        """Files this runtime needs beside the rendered lab (e.g. clabernetes objects), written with them."""
        return {}

    def inspect(self) -> dict[str, dict] | None:
        """node -> {"state", ...} as the container engine reports it; None where nodes are not containers."""
        return None

    # --- the deploy plan, the same on every runtime ---------------------------------------------------
    def deploy(self, progress: Report) -> None:
        topo, cfgs = load_nodes(self.config_dir)
        self.refuse_foreign(list(cfgs))
        requested = next((c.driver or "auto" for c in cfgs.values() if c.role == "host"), "auto")
        self.driver = nodesetup.host_driver(requested, kernel.has("bonding"))
        self.hold_ra = kernel.has("nft-ip6")  # without it nothing is held (hpnlab.machine.kernel says what that costs)
        st = self.state.data
        st.runtime, st.config, st.started, st.host_driver = self.name, str(self.config_dir), time.time(), self.driver
        st.netns = [self.netns(n) for n in cfgs]  # recorded before creation: down removes what exists
        self.state.save()
        if self.shares_kernel:
            need = neightable.entries_needed(topo, cfgs)
            want = {**neightable.thresholds(need), **neightable.backlog(topo)}
            raised = neightable.raise_to(want, NEIGH_RECORD, str(self.state.dir))
            what = (["the kernel's neighbour table (shared by all namespaces) for "
                     f"{need['ipv4']} ARP and {need['ipv6']} NDP entries"] if set(raised) - {neightable.BACKLOG}
                    else []) + ([f"the input backlog to {raised[neightable.BACKLOG]} packets per CPU"]
                                if neightable.BACKLOG in raised else [])
            if what:
                progress(f"raised {' and '.join(what)}; the last lab to go restores it")
        self.create_nodes(topo, cfgs, progress)
        if self.self_configuring:  # each node applies its node.json itself (hpnlab.node.agents.boot)
            self.wait_booted(list(cfgs), progress)
            return
        progress("configuring nodes (sysctls, addresses, nftables)")
        with ThreadPoolExecutor(max_workers=8) as ex:
            list(ex.map(lambda kv: self.configure_node(*kv), cfgs.items()))
        routers = [n for n, c in cfgs.items() if c.role != "host"]
        # With kernel bonds the bond speaks LACP and owns the routes; the hosts' agent only announces them.
        agents = [n for n, c in cfgs.items() if nodesetup.agent_module(c.plain(), self.driver)]
        first = [n for n in agents if not nodesetup.agent_needs_frr(cfgs[n].plain())]
        # zebra, then the agents, then the routing daemons (nodesetup.agent_needs_frr says why). zebra runs
        # before the first host route: FRR 8.4's zebra can miss a route that is already in table 10 when it
        # starts (its import-table left one of 128 ToR host routes out of the RIB in about one start of
        # three at 48 nodes); a route added while zebra runs is imported as it arrives.
        progress(f"starting zebra on {len(routers)} routers")
        self.start_frr(routers, cfgs, daemons=frr.DAEMONS[:1])
        progress(f"starting {len(first)} agents")
        self.start_agents(first, cfgs)
        progress(f"starting bgpd{' and bfdd' if any(c.bfd for c in cfgs.values()) else ''} on {len(routers)} routers")
        self.start_frr(routers, cfgs, daemons=frr.DAEMONS[1:])
        self.open_fabric(routers, cfgs, progress)
        later = [n for n in agents if n not in set(first)]
        if later:
            progress(f"starting {len(later)} agents that talk to FRR")
        self.start_agents(later, cfgs)

    def configure_node(self, node: str, cfg: NodeConfig) -> None:
        """Sysctls, addresses/bonds, link capacity, nftables, applied from outside through the node's namespace (so a
        container needs no tools or capabilities for it): the node's own plan (hpnlab.node.plan) on its node.json."""
        cfg = cfg.plain()
        values = nodesetup.sysctls(cfg, self.state.data.skip_sysctls)
        path = self.netns_path(node)
        if path is not None:  # from this thread inside the node: no process per node (hpnlab.node.nsenter)
            try:
                nsenter.write_sysctls(path, values)
            except OSError as e:
                raise RuntimeFailure(f"{node}: sysctl {e.filename}: {e.strerror}") from None
        else:
            self.run(node, ["sysctl", "-q", "-w", *[f"{k}={v}" for k, v in values.items()]], what=f"{node}: sysctl")
        run(["ip", "-n", self.netns(node), "-batch", "-"],
            input="\n".join(nodesetup.ip_batch(cfg, self.driver)) + "\n", what=f"{node}: addresses")
        shaping = capacity.tc_batch(cfg)
        if shaping:
            run(["tc", "-n", self.netns(node), "-batch", "-"], input="\n".join(shaping) + "\n",
                what=f"{node}: link capacity (tc tbf)")
        rules = nodesetup.nft_ruleset(cfg)
        if rules:
            self.nft(node, rules, "nftables ARP duplication")
        hold = nodesetup.ra_hold_ruleset(cfg)  # released by open_fabric once every bgpd runs
        if hold and self.hold_ra:
            self.nft(node, hold, "nftables router advertisements held")

    def nft(self, node: str, rules: str, what: str) -> None:
        self.run(node, ["nft", "-f", "-"], input=rules, what=f"{node}: {what}")

    # How long open_fabric waits for the ToRs to learn their aggs' addresses before it lets the aggs learn
    # theirs; past it the lab goes on (a session then may wait FRR's 1 s timers, as without the hold).
    fabric_learn_timeout = 5.0

    def open_fabric(self, routers: list[str], cfgs: dict[str, NodeConfig], progress: Report) -> None:
        """Let the aggs open their ToR sessions, now that every bgpd runs (hpnlab.node.plan.ra_hold_ruleset
        says why they waited). First each ToR hears and solicits its aggs' Router Advertisements and learns
        where they are, so it can take the connections that follow (a passive ToR refuses one from an address
        it has not learnt, and the agg would retry only after 1 s); then the ToRs' advertisements are
        released and solicited, and each agg, learning a ToR's address, connects at once."""
        tors = [n for n in routers if cfgs[n].role == "tor"]
        if not tors:
            return
        progress(f"opening {len(tors)} ToRs' BGP sessions to their aggs"
                 + (" (router advertisements released)" if self.hold_ra else ""))
        fabric = {n: cfgs[n].fabric_ifaces or [] for n in routers}
        uplinks = {n: fabric[n] for n in tors}
        tor_set = set(tors)
        facing = {n: [i.name for i in cfgs[n].interfaces if i.name in fabric[n] and i.peer in tor_set]
                  for n in routers if n not in tor_set}
        if self.hold_ra:
            self.nft_each(tors, nodesetup.ra_listen_ruleset(), "hearing its aggs' router advertisements")
        self.send_solicitations(uplinks)
        late = self.wait_learnt(tors, uplinks)
        if late:
            progress(f"{len(late)} ToRs ({', '.join(late[:3])}) did not learn every agg's address within "
                     f"{self.fabric_learn_timeout:g} s; releasing them anyway (their sessions may wait FRR's timers)")
        if self.hold_ra:
            self.nft_each(tors, nodesetup.ra_release_ruleset(), "releasing router advertisements")
        self.send_solicitations({n: f for n, f in facing.items() if f})

    def nft_each(self, nodes: list[str], rules: str, what: str) -> None:
        with ThreadPoolExecutor(max_workers=8) as ex:
            list(ex.map(lambda n: self.nft(n, rules, what), nodes))

    def send_solicitations(self, ifaces: dict[str, list[str]]) -> None:
        """A Router Solicitation out of these interfaces of these nodes (hpnlab.node.agents.solicit), where this
        machine can enter the nodes' namespaces; elsewhere zebra's own timer sends the advertisements within
        a second."""
        paths = {n: self.netns_path(n) for n in ifaces}
        if any(p is None for p in paths.values()):
            return
        with ThreadPoolExecutor(max_workers=8) as ex:
            list(ex.map(lambda n: solicit.solicit(paths[n], ifaces[n]), ifaces))

    def wait_learnt(self, tors: list[str], uplinks: dict[str, list[str]]) -> list[str]:
        """Until each ToR's bgpd knows the address of every agg it peers with (``bgpNeighborAddr``); returns
        the ToRs that did not within fabric_learn_timeout."""
        def learnt(n: str) -> bool:
            d = self.daemon_json(n, "bgpd", "show bgp neighbors json", timeout=2) or {}
            return all(isinstance(d.get(i), dict) and "bgpNeighborAddr" in d[i] for i in uplinks[n])

        deadline = time.monotonic() + self.fabric_learn_timeout
        todo = list(tors)
        with ThreadPoolExecutor(max_workers=8) as ex:
            while todo:
                todo = [n for n, ok in zip(todo, ex.map(learnt, todo)) if not ok]
                if not todo or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
        return todo

    # --- running things in a node ---------------------------------------------------------------------
    def exec_target(self, node: str) -> str:
        """What the channel needs to find the node (a namespace here; a pod and container elsewhere)."""
        return self.netns(node)

    def exec_argv(self, node: str, argv: list[str]) -> list[str]:
        return self.channel.argv(self.exec_target(node), argv)

    def netns_path(self, node: str) -> Path | None:
        """The node's named network namespace on this machine, where a thread of the controller can enter
        it (hpnlab.nsenter) instead of starting a process in it; None where the node is reached otherwise."""
        if not isinstance(self.channel, NetnsChannel):
            return None
        p = NETNS_DIR / self.netns(node)
        return p if p.exists() else None

    def tool_argv(self, node: str, argv: list[str]) -> tuple[list[str], Path | None]:
        """A node tool's command; over a remote channel its ``--out`` report comes back on standard output
        instead, and the second value says which local file to write that output to."""
        if not self.channel.remote or "--out" not in argv:
            return self.exec_argv(node, argv), None
        i = argv.index("--out")
        return self.exec_argv(node, [*argv[:i + 1], "-", *argv[i + 2:]]), Path(argv[i + 1])

    def read_status(self, node: str) -> dict | None:
        """The agent's status with ``age``: seconds since its heartbeat, on the node's own clock."""
        try:
            st = json.loads(self.status_path(node).read_text())
        except (OSError, ValueError):
            return None
        st["age"] = time.time() - st.get("time", 0)
        return st

    def agent_alive(self, node: str) -> tuple[bool, str]:
        pid = self.agent_pid(node)
        from hpnlab.machine.proc import pid_alive

        if pid is None:
            return False, "no agent process"
        return pid_alive(pid), f"pid {pid}" if pid_alive(pid) else f"agent process {pid} is not running"

    def run(self, node: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
        kw.setdefault("what", f"{node}: {argv[0]}")
        return run(self.exec_argv(node, argv), **kw)

    def vty_socket(self, node: str, daemon: str) -> Path | None:
        """A daemon's vty socket as this machine can reach it; None where only a command in the node can."""
        return None

    def daemon_json(self, node: str, daemon: str, command: str, timeout: float = 20) -> dict | list | None:
        """One ``show ... json`` command of one daemon, parsed, or None when it does not answer: over its vty
        socket where this machine can reach it (no vtysh process: hpnlab.machine.vty), else through vtysh."""
        sock = self.vty_socket(node, daemon)
        if sock is not None:  # bfdd's show commands are in the enable node only (hpnlab.machine.vty)
            return vty.command_json(sock, command, timeout, enable=daemon == "bfdd")
        return self.vtysh_json(node, command, timeout)

    def vtysh_json(self, node: str, command: str, timeout: float = 20) -> dict | list | None:
        """Parsed JSON, or None when the router does not answer (also when it hangs past ``timeout``)."""
        try:
            r = run(self.vtysh_argv(node, [command]), timeout=timeout, check=False)
        except RuntimeFailure:
            return None
        if r.returncode != 0:
            return None
        try:
            return json.loads(r.stdout or "null")
        except ValueError:
            return None

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
        """The lab's state directory; and when it was the last lab, the neighbour table limits labs raised."""
        shutil.rmtree(self.state.dir, ignore_errors=True)
        neightable.release(NEIGH_RECORD, str(self.state.dir), lambda holder: (Path(holder) / "state.json").exists())


def netns_members(names: list[str]) -> dict[int, str]:
    """pid -> namespace name, for every process inside one of the named namespaces. Read from /proc in
    this process (one pass, no `ip netns pids` per namespace: that took 127 s for 264 namespaces on a
    loaded machine)."""
    inodes = {}
    for n in names:
        try:
            st = os.stat(f"/run/netns/{n}")
            inodes[(st.st_dev, st.st_ino)] = n
        except OSError:
            pass
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                st = os.stat(f"/proc/{entry.name}/ns/net")
            except OSError:
                continue
            n = inodes.get((st.st_dev, st.st_ino))
            if n:
                out[int(entry.name)] = n
    return out


def list_netns() -> list[str]:
    """Every network namespace name on the machine (``ip netns list`` adds "(id: N)" after some)."""
    return [ln.split()[0] for ln in run(["ip", "netns", "list"], check=False).stdout.splitlines() if ln.strip()]

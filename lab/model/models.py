"""Typed models of the two files a running lab keeps: each node's node.json (what the renderer wrote for
the runtime and the node's agent) and the lab's state.json (what the runtime created, recorded before it
is created). Loading either validates it, so a damaged file is one clear line, not a KeyError later.

The agents inside the nodes read node.json as plain JSON (they must not import pydantic); these models
are the controller's view of the same files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hpnlab.errors import StateError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Interface(_Model):
    name: str
    mac: str
    peer: str
    peer_iface: str
    kind: Literal["access", "uplink", "core", "peer", "oob"]
    shape: dict[str, int] | None = None  # {"rate_kbit", "queue_bytes"}: a tbf on this end


class Nic(_Model):
    rail: int
    ip: str
    mac: str
    subnet: str
    gateway: str
    ports: list[str]
    tors: list[str]
    remote_subnets: list[str]


class HostPort(_Model):
    iface: str
    port_id: int | None
    host: str
    host_iface: str
    host_port: int | None
    host_ip: str | None = None


class NodeConfig(_Model):
    lab: str
    name: str
    role: Literal["host", "tor", "agg", "core"]
    interfaces: list[Interface]
    mechanisms: dict[str, bool]
    sysctls: dict[str, int | str]  # a vector (tcp_rmem) is its fields separated by spaces
    offloads: bool = False  # links.offloads: false caps GSO at one segment (hpnlab.node.plan.offload_lines)
    time_dilation: int = 1  # spec time_dilation: the agents scale their LACP timers and announcements by it
    lacp: dict[str, Any] | None = None
    # hosts
    driver: Literal["auto", "userspace", "bond"] | None = None
    rto_min_ms: int | None = None  # a dilated lab's hosts: TCP's minimum RTO on their routes (Spec.host_rto_min_ms)
    nics: list[Nic] | None = None
    # routers
    asn: int | None = None
    router_id: str | None = None
    bfd: bool | None = None
    fabric_ifaces: list[str] | None = None
    # ToRs
    segment: int | None = None
    rail: int | None = None
    side: str | None = None
    plane: int | None = None
    subnet: str | None = None
    gateway: str | None = None
    table: int | None = None
    host_ports: list[HostPort] | None = None
    remote_subnets: list[str] | None = None
    holddown: dict[str, Any] | None = None
    session_detect_s: float | None = None
    micro_bfd: dict[str, Any] | None = None  # hosts and ToRs
    stacked: dict[str, Any] | None = None  # ToRs of a stacked pair: role, peer, timeouts
    qos: dict[str, Any] | None = None  # switches of a spec with qos: its queues (hpnlab.model.qos.QoS.node_json)
    multipath: dict[str, Any] | None = None  # aggs with FARE: mode, interval_s, tors {port: the ToR's ASN}; spraying ToRs: mode, uplinks

    @property
    def iface_names(self) -> list[str]:
        return [i.name for i in self.interfaces]

    def iface(self, name: str) -> Interface | None:
        return next((i for i in self.interfaces if i.name == name), None)

    def nic(self, rail: int) -> Nic | None:
        """A host's NIC on ``rail`` (None: no such rail, or not a host)."""
        return next((n for n in self.nics or [] if n.rail == rail), None)

    def plain(self) -> dict:
        """node.json as the node itself reads it (plain JSON: the node plan and the agents take dicts)."""
        return self.model_dump(exclude_none=True)


class FaultRecord(_Model):
    kind: str
    node: str
    iface: str | None = None
    at: float = 0.0
    until: float | None = None
    period: float = 1.0
    count: int = 3
    undo: dict[str, Any] = {}
    params: dict[str, float] = {}


class LabState(_Model):
    """state.json: rewritten after every step of a deploy, so ``down`` can undo a crashed ``up``."""

    lab: str
    runtime: str = "netns"
    config: str | None = None
    started: float | None = None
    host_driver: Literal["userspace", "bond"] | None = None
    kernel: str | None = None  # the kernel release the lab runs on (namespaces and containers share it)
    kernel_notes: list[str] = []  # what the lab runs without on this kernel (hpnlab.machine.kernel.assess)
    skip_sysctls: list[str] = []  # plan sysctls left out because this kernel lacks them
    netns: list[str] = []  # namespaces the lab creates, recorded before creation
    frr_dirs: list[str] = []  # FRR pathspace directories, recorded before creation
    agents: dict[str, int] = {}  # node -> agent PID (namespace runtime)
    frr_pids: dict[str, int] = {}  # "<node>/<daemon>" -> PID, read from the pid files once FRR started
    # "<node>/<daemon>" -> the PID a daemon started under, before it forked: FRR names its crash-log directory
    # (/var/tmp/frr/<daemon>.<pid>) after it, and only a clean exit removes it
    frr_launch_pids: dict[str, int] = {}
    faults: list[FaultRecord] = []  # applied and not yet reverted, with their undo recipes
    impairments: dict[str, dict[str, float]] = {}  # "node:iface" -> rate/queue/loss/delay in force
    clab_topology: str | None = None
    k8s_namespace: str | None = None  # c9s runtime: where its clabernetes objects live
    k8s_api: str | None = None  # c9s runtime: the clabernetes API group it was written for (names differ)
    k8s_context: str | None = None
    owner_pid: int | None = Field(None, description="the hpnlab process deploying it (while it deploys)")


def _why(err: ValidationError) -> str:
    e = err.errors(include_url=False)[0]
    return f"field '{'.'.join(map(str, e['loc'])) or '(top)'}': {e['msg']}"


def load_json_model(model: type[_Model], path: Path, what: str, fix: str) -> _Model:
    """Read and validate one file; every way it can be damaged is one StateError line saying ``fix``."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise StateError(f"{what} {path} is missing: {fix}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise StateError(f"{what} {path} cannot be read ({e.__class__.__name__}): {fix}") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise StateError(f"{what} {path} is not valid JSON ({e.msg} at line {e.lineno}): {fix}") from None
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise StateError(f"{what} {path} is damaged ({_why(err)}): {fix}") from None

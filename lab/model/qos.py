"""The spec's ``qos``: priority queues on every shaped switch egress port and the DSCP -> queue map; what
each switch's node.json gets (the queues themselves are built by hpnlab.node.qos, part of the node plan)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hpnlab.node.qos import MAX_QUEUES, applies  # noqa: F401 (applies: re-exported for verify)

# RFC 2474/2597/3246 code point names, as switches and nft write them
NAMES = {**{f"cs{i}": 8 * i for i in range(8)},
         **{f"af{c}{d}": 8 * c + 2 * d for c in range(1, 5) for d in range(1, 4)}, "ef": 46}


def dscp_value(key: int | str) -> int:
    """A DSCP given as 0..63 or a name (cs0-cs7, af11-af43, ef); ValueError says what is accepted."""
    if isinstance(key, bool):
        raise ValueError(f"DSCP {key!r} is not a code point")
    if isinstance(key, int):
        v = key
    elif isinstance(key, str) and re.fullmatch(r"\d{1,2}", key.strip()):
        v = int(key)
    elif isinstance(key, str) and key.strip().lower() in NAMES:
        return NAMES[key.strip().lower()]
    else:
        raise ValueError(f"DSCP '{key}' is not 0..63 or a name (cs0-cs7, af11-af43, ef)")
    if not 0 <= v <= 63:
        raise ValueError(f"DSCP {v} is not in 0..63")
    return v


class QoS(BaseModel):
    """Priority queues on every shaped switch egress port (ToRs, aggs and cores, both ends of every shaped
    link; hosts keep their tbf): queue 0 is served first. A packet goes to the queue its DSCP maps to
    (``dscp``; a workload marks its connections with ``workload.dscp``), anything else, the switches' own
    BGP, BFD and LACP included, to ``default_queue``. Needs shaped links (``links``): an unshaped port
    never queues. Left out: one FIFO per port, as before."""

    model_config = ConfigDict(extra="forbid")
    queues: int = Field(8, ge=1, le=MAX_QUEUES, description="priority queues per port, K (queue 0 first)")
    scheduler: Literal["htb", "prio", "ets"] = Field("htb", description=(
        "htb: strict priority above a small guaranteed rate per queue (min_rate_pct), on every kernel; "
        "prio or ets: pure strict priority under a tbf at the link rate, where the kernel has that qdisc"))
    dscp: dict[int | str, int] = Field({}, description=(
        "DSCP -> queue, e.g. {46: 0, af41: 1} (a code point 0..63 or its name: cs0-cs7, af11-af43, ef)"))
    default_queue: int | None = Field(None, ge=0, description=(
        "the queue of every DSCP the map leaves out and of the switches' own packets (default: the last, "
        "queues - 1)"))
    queue_kb: int | None = Field(None, ge=4, le=65536, description=(
        "each queue's buffer per port, KB (a bfifo; default: the link class's queue_kb, per queue)"))
    min_rate_pct: float = Field(1.0, gt=0, le=100, description=(
        "htb: each queue's guaranteed share of the link rate, percent (queues x min_rate_pct <= 100); what a "
        "lower queue still gets while a higher one is backlogged"))

    @field_validator("dscp", mode="before")
    @classmethod
    def _codes(cls, v):
        if not isinstance(v, dict):
            return v
        out: dict[int, int] = {}
        for key, q in v.items():
            code = dscp_value(key)
            if code in out:
                raise ValueError(f"DSCP {code} is given twice ('{key}')")
            out[code] = q
        return out

    @model_validator(mode="after")
    def _fits(self) -> "QoS":
        k = self.queues
        for code, q in self.dscp.items():
            if not 0 <= q < k:
                raise ValueError(f"dscp {code} maps to queue {q}, but queues are 0..{k - 1} (queues: {k})")
        if self.default_queue is not None and self.default_queue >= k:
            raise ValueError(f"default_queue {self.default_queue} is not one of the queues 0..{k - 1}")
        if self.scheduler == "htb" and k * self.min_rate_pct > 100:
            raise ValueError(f"min_rate_pct {self.min_rate_pct:g} x {k} queues guarantees more than the link "
                             f"rate; give at most {100 / k:g}")
        if self.scheduler == "prio" and k < 2:
            raise ValueError("scheduler prio needs queues >= 2 (the kernel's prio has at least two bands)")
        return self

    def node_json(self) -> dict:
        """A switch's node.json ``qos`` (hpnlab.node.qos reads it; JSON keys are strings)."""
        return {"queues": self.queues, "scheduler": self.scheduler,
                "dscp": {str(c): q for c, q in sorted(self.dscp.items())},
                "default_queue": self.queues - 1 if self.default_queue is None else self.default_queue,
                "queue_bytes": self.queue_kb * 1024 if self.queue_kb else None, "min_rate_pct": self.min_rate_pct}


def port_problems(ifc: str, shape: dict, qos: dict, qdiscs: list[dict]) -> list[str]:
    """What differs on one switch port from its queues (``tc -j qdisc show``'s entries for it): the root
    qdisc the scheduler needs (tbf at the link rate under prio/ets), one bfifo per queue with its buffer."""
    from hpnlab.node.qos import queue_bytes, queue_of_handle

    root = next((q for q in qdiscs if q.get("root")), {})
    want = "htb" if qos["scheduler"] == "htb" else "tbf"
    out = []
    if root.get("kind") != want:
        out.append(f"{ifc}: {root.get('kind', 'no')} qdisc, spec says qos {qos['scheduler']} ({want} root)")
    elif want == "tbf" and round(root.get("options", {}).get("rate", 0) * 8 / 1000) != shape["rate_kbit"]:
        out.append(f"{ifc}: tbf not at the link's {shape['rate_kbit']} kbit/s")
    limits = {}
    for q in qdiscs:
        major = int(q.get("handle", "0:").split(":")[0] or "0", 16)
        if q.get("kind") == "bfifo" and queue_of_handle(major) is not None:
            limits[queue_of_handle(major)] = q.get("options", {}).get("limit")
    need = queue_bytes(qos, shape)
    if sorted(limits) != list(range(qos["queues"])) or any(v != need for v in limits.values()):
        out.append(f"{ifc}: queues {sorted(limits)} of {sorted(set(limits.values()))} B, spec says "
                   f"{qos['queues']} of {need} B")
    return out

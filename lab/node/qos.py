"""Switch QoS as data: K priority queues under the link rate on every shaped egress port of a switch, and
the nftables map that puts each packet in its DSCP's queue. Pure functions with only the standard library
(part of the node plan: hpnlab.node.plan calls them), from node.json's ``qos``:
{queues, scheduler, dscp: {"<dscp>": queue}, default_queue, queue_bytes, min_rate_pct}.

Queue 0 is the highest priority. Schedulers:

- ``htb`` (default): an htb root class at the link rate; per queue k a class ``1:1k`` with ``prio k``, a
  small guaranteed rate (``min_rate_pct`` of the link) and ceil = the link rate, and a bfifo leaf as its
  byte-limited buffer. Strict priority above the guarantees: the highest backlogged queue takes whatever
  the others do not use of their guarantee. Why the default: every kernel the lab runs on has htb (this
  project's CI kernel has neither prio nor ets), and the guarantee keeps a busy high queue from starving
  the lowest one, where the switches' own BGP, BFD and LACP packets go.
- ``prio`` / ``ets``: a tbf at the link rate whose child is a strict-priority qdisc of K bands (``prio``;
  ``ets`` with every band strict), a bfifo per band: pure strict priority, a lower band gets nothing while
  a higher one is backlogged. Only where the kernel has them (hpnlab.machine.kernel checks).

Classification: the nftables table ``hpnlab_qos`` sets each packet's skb->priority from its DSCP in
postrouting (``meta priority set ip dscp map {46 : 1:10}``); htb, prio and ets all take a priority whose
major number is their own handle as the class (band) itself. A DSCP the map does not name, and every
packet the switch sends itself, keeps the kernel's priority (0..7, never a qdisc handle) and goes to
``default_queue``.
"""

from __future__ import annotations

QOS_NFT_TABLE = "hpnlab_qos"
LEAF_BASE = 0x10  # queue k's bfifo is qdisc (LEAF_BASE + k):, and under htb its class is 1:(LEAF_BASE + k)
BAND_PARENT = 2  # prio/ets: the band qdisc's handle under the tbf (its bands are 2:1 .. 2:K)
MAX_QUEUES = 8
SCHEDULERS = ("htb", "prio", "ets")
QDISC_OF = {"htb": "htb", "prio": "prio", "ets": "ets"}  # the qdisc each scheduler needs (hpnlab.machine.kernel)


def applies(cfg: dict) -> bool:
    """Whether a node queues by class: a switch with ``qos`` in its node.json (hosts send, they do not queue)."""
    return cfg["role"] != "host" and bool(cfg.get("qos"))


def class_of(qos: dict, queue: int) -> str:
    """The tc handle of ``queue`` that skb->priority names (htb class or prio/ets band), as tc and nft write it."""
    if qos["scheduler"] == "htb":
        return f"1:{LEAF_BASE + queue:x}"
    return f"{BAND_PARENT}:{queue + 1:x}"


def queue_of_handle(major: int) -> int | None:
    """A leaf qdisc's queue from its handle's major number (None: not a queue's leaf)."""
    k = major - LEAF_BASE
    return k if 0 <= k < MAX_QUEUES else None


def queue_bytes(qos: dict, shape: dict) -> int:
    """Each queue's buffer on a port: qos.queue_kb, else the link's own queue."""
    return qos.get("queue_bytes") or shape["queue_bytes"]


def tc_lines(dev: str, shape: dict, qos: dict, burst: int, mtu_frame: int) -> list[str]:
    """``tc -batch`` lines of one shaped switch port with queues (replace throughout: idempotent)."""
    k, rate, q = qos["queues"], shape["rate_kbit"], queue_bytes(qos, shape)
    d = qos["default_queue"]
    leaves = []
    if qos["scheduler"] == "htb":
        guaranteed = max(1, round(rate * qos["min_rate_pct"] / 100))
        out = [f"qdisc replace dev {dev} root handle 1: htb default {LEAF_BASE + d:x}",
               f"class replace dev {dev} parent 1: classid 1:1 htb rate {rate}kbit ceil {rate}kbit "
               f"burst {burst} cburst {burst} quantum {mtu_frame}"]
        for i in range(k):
            # quantum: one frame (it only splits a level's sharing among classes of one prio; each has its own)
            out.append(f"class replace dev {dev} parent 1:1 classid 1:{LEAF_BASE + i:x} htb rate {guaranteed}kbit "
                       f"ceil {rate}kbit burst {burst} cburst {burst} prio {i} quantum {mtu_frame}")
            leaves.append(f"1:{LEAF_BASE + i:x}")
    else:
        # the bands' default for a priority that names none of them (0..15): the default queue
        priomap = " ".join([str(d)] * 16)
        band = f"bands {k} priomap {priomap}" if qos["scheduler"] == "prio" else f"bands {k} strict {k} priomap {priomap}"
        out = [f"qdisc replace dev {dev} root handle 1: tbf rate {rate}kbit burst {burst} limit {k * q}",
               f"qdisc replace dev {dev} parent 1:1 handle {BAND_PARENT}: {qos['scheduler']} {band}"]
        leaves = [f"{BAND_PARENT}:{i + 1:x}" for i in range(k)]
    for i, parent in enumerate(leaves):
        out.append(f"qdisc replace dev {dev} parent {parent} handle {LEAF_BASE + i:x}: bfifo limit {q}")
    return out


def nft_ruleset(cfg: dict) -> str | None:
    """The switch's DSCP -> queue map (postrouting: after the route lookup, before the egress qdisc)."""
    if not applies(cfg) or not cfg["qos"].get("dscp"):
        return None
    qos = cfg["qos"]
    elems = ", ".join(f"{int(code)} : {class_of(qos, q)}" for code, q in sorted(qos["dscp"].items(), key=lambda x: int(x[0])))
    return (f"table ip {QOS_NFT_TABLE} {{\n  chain classify {{\n"
            "    type filter hook postrouting priority 0; policy accept;\n"
            f"    meta priority set ip dscp map {{ {elems} }}\n"
            "  }\n}\n")

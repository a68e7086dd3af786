"""Change one link end of a running lab: its rate (tc tbf), its queue, random loss (nftables) and, where
the kernel has netem, delay. ``clear`` puts back what the spec says. Each change is recorded in the lab's
state.json before it takes effect, so ``hpnlab impair --clear`` (or ``down``) always finds it.

Loss is nftables (``numgen random mod 10000 < N drop`` on the link end's egress), not netem: this
project's CI kernel has no netem, and the nftables drop behaves the same for a loss rate.

Loss and the queue act on MTU frames, as a switch port's do: every interface of a lab caps GSO at one
segment (hpnlab.node.plan.offload_lines), so TCP sends no 64 KB super-packets for one drop to take ~45
frames at once (``links.offloads: true`` brings them back, and with them that error). Loss on the port of
a host that sends is a local drop to that host's own TCP, not a lossy wire: the egress hook's verdict
reaches the socket (NET_XMIT_DROP), which sends the frame again without counting a retransmission and cuts
its window each time (docs/design.md has the figures). Impair the ToR's end of the link for loss on the way
to a host, or a port further along for loss after it.
"""

from __future__ import annotations

import math

from hpnlab.model import capacity
from hpnlab.machine import kernel
from hpnlab.errors import RuntimeFailure, SpecError
from hpnlab.model.models import Interface
from hpnlab.node import qos
from hpnlab.runtime.base import Runtime

KEYS = {"rate": "egress rate, e.g. 10mbit, 500kbit, 1gbit",
        "queue": "queue limit in KB (with a rate; default: the spec's, else 256)",
        "loss": "random loss in percent of the frames (MTU-sized: links.offloads), e.g. 1 or 0.5",
        "delay": "one-way delay, e.g. 10ms (needs the kernel's netem)"}
TABLE_PREFIX = "hpnlab_impair"
DEFAULT_QUEUE_KB = 256


def parse(items: list[str]) -> dict:
    """['rate=10mbit', 'loss=1'] -> {"rate_kbit": 10000, "loss_pct": 1.0}; one-line errors naming the key."""
    out: dict = {}
    for it in items:
        key, sep, val = it.partition("=")
        if not sep or key not in KEYS:
            raise SpecError(f"impair setting '{it[:40]}': give KEY=VALUE with KEY one of {', '.join(KEYS)}")
        if key == "rate":
            try:
                out["rate_kbit"] = capacity.parse_rate(val)
            except ValueError as e:
                raise SpecError(f"impair rate: {e}") from None
        elif key == "queue":
            q = _number(key, val.lower().removesuffix("kb"))
            if not 4 <= q <= 65536:
                raise SpecError("impair queue: give 4 to 65536 (KB)")
            out["queue_bytes"] = int(q * 1024)
        elif key == "loss":
            p = _number(key, val.removesuffix("%"))
            if not 0 < p <= 100:
                raise SpecError("impair loss: give a percentage above 0 and at most 100, e.g. loss=1")
            out["loss_pct"] = p
        else:
            v = val.lower()
            ms = _number(key, v.removesuffix("ms")) if v.endswith("ms") or v.replace(".", "", 1).isdigit() else None
            if ms is None or not 0 < ms <= 10000:
                raise SpecError("impair delay: give milliseconds above 0 and at most 10000, e.g. delay=10ms")
            out["delay_ms"] = ms
    if not out:
        raise SpecError(f"impair: give at least one of {', '.join(f'{k}=' for k in KEYS)} (or --clear)")
    if "queue_bytes" in out and "rate_kbit" not in out:
        raise SpecError("impair queue: a queue limit goes with a rate; add rate=...")
    return out


def _number(key: str, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise SpecError(f"impair {key}: '{text[:20]}' is not a number") from None
    if not math.isfinite(v):
        raise SpecError(f"impair {key}: give a finite number")
    return v


def _iface(cfgs: dict, node: str, iface: str) -> Interface:
    if node not in cfgs:
        raise SpecError(f"impair node: '{node}' is not in the lab; nodes: {', '.join(sorted(cfgs))}")
    found = cfgs[node].iface(iface)
    if found is None:
        raise SpecError(f"impair iface: '{iface}' is not an interface of {node}; it has "
                        f"{', '.join(cfgs[node].iface_names)}")
    return found


def table(iface: str) -> str:
    return f"{TABLE_PREFIX}_{iface.replace('-', '_')}"


def apply(rt: Runtime, cfgs: dict, node: str, iface: str, settings: dict) -> dict:
    """Impair one link end; returns what is now in force there."""
    ifc = _iface(cfgs, node, iface)
    if "delay_ms" in settings and not netem_available(rt, node):
        raise RuntimeFailure("impair delay: this kernel has no netem (sch_netem; Debian's and Ubuntu's stock "
                             "kernels have it), so no delay can be added; rate and loss work without it")
    key = f"{node}:{iface}"
    st = rt.state.data
    now = {**st.impairments.get(key, {}), **settings}
    st.impairments[key] = now
    rt.state.save()  # recorded first: a crash half-way still leaves the recipe for --clear
    shape = ifc.shape or {}
    rate = now.get("rate_kbit", shape.get("rate_kbit"))
    queue = now.get("queue_bytes", shape.get("queue_bytes", DEFAULT_QUEUE_KB * 1024))
    if rate:
        if qos.applies(cfgs[node].plain()):
            # a switch port's queues (spec qos) give way to impair's tbf: the kernel will not replace an htb
            # root by another kind in place ("must match existing qdisc"); clear builds the queues again
            rt.run(node, ["tc", "qdisc", "del", "dev", iface, "root"], check=False)
        rt.run(node, ["tc", "qdisc", "replace", "dev", iface, "root", "handle", "1:",
                      *capacity.tbf_args({"rate_kbit": rate, "queue_bytes": queue})], what=f"{key}: rate")
        if "delay_ms" in now:
            rt.run(node, ["tc", "qdisc", "replace", "dev", iface, "parent", "1:1", "handle", "10:", "netem",
                          "delay", f"{now['delay_ms']:g}ms"], what=f"{key}: delay")
    elif "delay_ms" in now:
        rt.run(node, ["tc", "qdisc", "replace", "dev", iface, "root", "handle", "1:", "netem", "delay",
                      f"{now['delay_ms']:g}ms"], what=f"{key}: delay")
    if "loss_pct" in now:
        n = max(1, round(now["loss_pct"] * 100))
        rules = (f"table netdev {table(iface)} {{\n  chain loss {{\n"
                 f"    type filter hook egress device \"{iface}\" priority -400; policy accept;\n"
                 f"    numgen random mod 10000 < {n} drop\n  }}\n}}\n")
        rt.run(node, ["nft", "delete", "table", "netdev", table(iface)], check=False)  # replace, not add twice
        rt.run(node, ["nft", "-f", "-"], input=rules, what=f"{key}: loss")
    return now


def netem_available(rt: Runtime, node: str) -> bool:
    """A throwaway netem qdisc on the node's loopback: present on most distribution kernels, not on CI's."""
    if "netem" in kernel.pretended_missing():  # (probed in the node below: a remote pod's kernel counts)
        return False
    r = rt.run(node, ["tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "netem", "delay", "0ms"],
               check=False)
    if r.returncode == 0:
        rt.run(node, ["tc", "qdisc", "del", "dev", "lo", "root"], check=False)
        return True
    return False


def restore(rt: Runtime, cfgs: dict, node: str, iface: str) -> None:
    """What the spec says for this link end: its tbf, a switch's qos queues (or no qdisc), no loss table."""
    ifc = _iface(cfgs, node, iface)
    if ifc.shape:
        for argv in capacity.port_argvs(cfgs[node].plain(), iface, ifc.shape):
            rt.run(node, argv, check=False)
    else:
        rt.run(node, ["tc", "qdisc", "del", "dev", iface, "root"], check=False)
    rt.run(node, ["nft", "delete", "table", "netdev", table(iface)], check=False)


def clear(rt: Runtime, cfgs: dict, node: str | None = None, iface: str | None = None) -> list[str]:
    """Undo the recorded impairments (all, one node's, or one link end's); returns what was cleared."""
    st = rt.state.data
    done = []
    for key in list(st.impairments):
        n, i = key.split(":", 1)
        if (node and n != node) or (iface and i != iface):
            continue
        restore(rt, cfgs, n, i)
        del st.impairments[key]
        done.append(key)
    rt.state.save()
    return done

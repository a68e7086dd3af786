"""The network sysctls a lab's figures depend on but a spec does not name, and the kernel's own defaults
for them (what a Debian or Ubuntu machine that nobody tuned runs).

A new network namespace does not start from the kernel's defaults for TCP's buffer bounds: it copies the
root namespace's ``net.ipv4.tcp_rmem``/``tcp_wmem`` (net/ipv4/tcp_ipv4.c, ``tcp_sk_init``). A tool run on
the same machine that raised them (Mininet's ``fixLimits`` sets both to ``10240 87380 16777216``) would
silently give every later lab's TCP other windows, and so other queueing and other throughput. Hosts
therefore set both themselves (``HOST_TCP_BUFFERS``, part of every host's sysctls).

Some keys are not per namespace: ``net.core.netdev_max_backlog`` (the per-CPU queue every veth's packets
pass through, ``netif_rx``) and ``net.core.rmem_max``/``wmem_max`` (the cap on a socket's SO_RCVBUF and
SO_SNDBUF) are the machine's. A lab leaves the socket caps alone; it raises the backlog to what its links
need while it runs (never lowers it; the last lab to go puts it back: hpnlab.machine.neightable). It reads all
three, records them in every results file's provenance, and says at ``up``, in one short line each (in full:
``hpnlab doctor``), when they are not the kernel's defaults and whether running labs or the machine's owner
set them.
Pure apart from ``read_shared``, which reads /proc/sys.
"""

from __future__ import annotations

from pathlib import Path

PROC_SYS = Path("/proc/sys")

# The kernel's defaults on a machine with more than about 1 GB of memory (net/ipv4/tcp.c, tcp_init: the
# maxima are 4 MB and 6 MB, lowered only on smaller machines).
HOST_TCP_BUFFERS: dict[str, str] = {
    "net.ipv4.tcp_rmem": "4096 131072 6291456",
    "net.ipv4.tcp_wmem": "4096 16384 4194304",
}

# Machine-wide keys a lab's packets or sockets depend on, with the kernel's defaults
# (net/core/dev.c netdev_max_backlog; net/core/sock.c, SK_{R,W}MEM_MAX on 64-bit).
SHARED_DEFAULTS: dict[str, str] = {
    "net.core.netdev_max_backlog": "1000",
    "net.core.rmem_max": "212992",
    "net.core.wmem_max": "212992",
}


def normalise(value: object) -> str:
    """A sysctl's value as one comparable string: /proc/sys separates a vector's fields by tabs."""
    return " ".join(str(value).split())


def read_shared(keys: list[str] | None = None, proc_sys: Path = PROC_SYS) -> dict[str, str]:
    """The root namespace's values of ``keys`` (default: the shared keys and the TCP buffer bounds new
    namespaces copy); "unknown" for one that cannot be read."""
    out = {}
    for k in keys if keys is not None else [*SHARED_DEFAULTS, *HOST_TCP_BUFFERS]:
        try:
            out[k] = normalise(Path(proc_sys, *k.split(".")).read_text())
        except OSError:
            out[k] = "unknown"
    return out


def drift(values: dict[str, str], held: dict[str, int] | None = None) -> list[tuple[str, str]]:
    """(short, full) notes on the machine-wide keys whose value is not the kernel's default (the TCP buffer
    bounds are left out: hosts set their own). ``held``: values running labs set (hpnlab.machine.neightable raises
    the backlog for their links): such a value is said to be theirs, not the machine owner's."""
    held = held or {}
    notes = []
    k = "net.core.netdev_max_backlog"
    have, default = values.get(k), SHARED_DEFAULTS[k]
    if have not in (None, "unknown") and normalise(have) != default:
        if held.get(k) is not None and str(held[k]) == normalise(have):
            notes.append((f"{k} is {have} (kernel default {default}): raised by the labs running now",
                          f"this machine's {k} is {have}, not the kernel's default {default}: the labs running now "
                          f"raised it to 10 packets per link of the largest of them (a lab raises it, never lowers "
                          f"it, and the last lab to go puts the value it found back); it is shared by every "
                          f"namespace: the per-CPU backlog every veth's packets are queued on (recorded in "
                          f"results' provenance)"))
        else:
            notes.append((f"{k} is {have} (kernel default {default}), set outside hpnlab",
                          f"this machine's {k} is {have}, not the kernel's default {default}, and no running lab "
                          f"set it: it is shared by every namespace, the per-CPU backlog every veth's packets are "
                          f"queued on before the receiving namespace takes them; a burst is dropped there later, "
                          f"or sooner, than on an untuned machine. A lab raises it to 10 packets per link when that "
                          f"is more (hpnlab.machine.neightable), never lowers it (recorded in results' provenance; "
                          f"'sysctl -w {k}={default}' restores the default)"))
    caps = [(c, values.get(c)) for c in ("net.core.rmem_max", "net.core.wmem_max")]
    caps = [(c, v) for c, v in caps if v not in (None, "unknown") and normalise(v) != SHARED_DEFAULTS[c]]
    if caps:
        names = " and ".join(f"{c} {v}" for c, v in caps)
        default = SHARED_DEFAULTS["net.core.rmem_max"]
        short = "/".join(c.split(".")[-1] for c, _v in caps) + " " + "/".join(v for _c, v in caps)
        notes.append((f"net.core.{short} (kernel default {default}): a user's socket may get bigger buffers",
                      f"this machine's {names} (the kernel's default: {default}) are shared by every namespace "
                      f"and a lab does not change them: the cap on a socket's requested buffer; the lab's own "
                      f"sockets force theirs, a user's may not (recorded in results' provenance; "
                      + ", ".join(f"'sysctl -w {c}={default}'" for c, _ in caps) + " restores the default)"))
    return notes

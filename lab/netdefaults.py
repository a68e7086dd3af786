"""The network sysctls a lab's figures depend on but a spec does not name, and the kernel's own defaults
for them (what a Debian or Ubuntu machine that nobody tuned runs).

A new network namespace does not start from the kernel's defaults for TCP's buffer bounds: it copies the
root namespace's ``net.ipv4.tcp_rmem``/``tcp_wmem`` (net/ipv4/tcp_ipv4.c, ``tcp_sk_init``). A tool run on
the same machine that raised them (Mininet's ``fixLimits`` sets both to ``10240 87380 16777216``) would
silently give every later lab's TCP other windows, and so other queueing and other throughput. Hosts
therefore set both themselves (``HOST_TCP_BUFFERS``, part of every host's sysctls).

Some keys are not per namespace: ``net.core.netdev_max_backlog`` (the per-CPU queue every veth's packets
pass through, ``netif_rx``) and ``net.core.rmem_max``/``wmem_max`` (the cap on a socket's SO_RCVBUF and
SO_SNDBUF) are the machine's. A lab must not change what it did not create, so it reads them, records
them in every results file's provenance, and says at ``up`` when they are not the kernel's defaults.
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


def drift(values: dict[str, str]) -> list[str]:
    """One note per machine-wide key whose value is not the kernel's default (the TCP buffer bounds are left
    out: hosts set their own)."""
    notes = []
    for k, default in SHARED_DEFAULTS.items():
        have = values.get(k)
        if have is None or have == "unknown" or normalise(have) == default:
            continue
        what = ("the per-CPU backlog every veth's packets are queued on before the receiving namespace takes "
                "them; a burst is dropped there later, or sooner, than on an untuned machine"
                if k == "net.core.netdev_max_backlog" else
                "the cap on a socket's requested buffer; the lab's own sockets force theirs, a user's may not")
        notes.append(f"this machine's {k} is {have}, not the kernel's default {default}; it is shared by every "
                     f"namespace and a lab does not change it: {what} (recorded in results' provenance; "
                     f"'sysctl -w {k}={default}' restores it)")
    return notes

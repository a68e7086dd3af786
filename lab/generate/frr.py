"""Everything about FRR in one place: which daemons a router runs, how each is launched in a node's
namespace, when they are ready, what the containers' ``daemons`` file says, and what must be installed.

The namespace runtime launches the daemons itself; the router image's watchfrr reads the rendered
``daemons`` file. Both come from the lists below, so the two runtimes cannot drift apart.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from hpnlab.errors import RuntimeFailure

BIN = Path("/usr/lib/frr")
RUN = Path("/var/run/frr")  # one pathspace per router: RUN/<lab>-<node>
TMP = Path("/var/tmp/frr")  # crash-log directories, <daemon>.<PID it started under>, left if it is killed
# Start order; zebra first (the others connect to it). No staticd: its one route (a ToR's subnet
# blackhole) is a kernel route from the node plan, which zebra imports as it does any kernel route:
# one process fewer per router (2.8 MiB PSS) for the same FIB and the same BGP origination.
DAEMONS = ("zebra", "bgpd", "bfdd")
# The daemons Debian's frr knows; those a router does not run are written "no" in the daemons file.
KNOWN = DAEMONS + ("staticd", "ospfd", "ospf6d", "ripd", "ripngd", "isisd", "pimd", "ldpd", "nhrpd", "eigrpd", "babeld",
                   "sharpd", "pbrd", "fabricd", "vrrpd", "pathd")
# zebra: the datacenter profile's timers, and a netlink receive buffer large enough for Pod-scale FIBs.
DAEMON_ARGS = {"zebra": ["-F", "datacenter", "-s", "90000000"]}
READY_FILE = "zserv.api"  # zebra's socket: the other daemons can connect once it exists


def daemons(bfd: bool) -> list[str]:
    """What one router runs: zebra, bgpd, and bfdd only where the spec turns BFD on."""
    return [d for d in DAEMONS if d != "bfdd" or bfd]


def launch_argv(daemon: str, pathspace: str, conf: Path, log: Path, pidfile: Path) -> list[str]:
    """One daemon of one router, run inside the router's namespace. ``-N`` keeps its sockets in
    RUN/<pathspace>, so routers never share a vty; per-daemon ``-f`` sets the hostname and config."""
    return [str(BIN / daemon), "-N", pathspace, "-d", "-P", "0", "-f", str(conf), "--log", f"file:{log}",
            "-i", str(pidfile), *DAEMON_ARGS.get(daemon, [])]


def is_daemon(argv: list[str], pathspace: str | None = None) -> bool:
    """Does a process command line belong to an FRR daemon (of this pathspace, when given)?"""
    if not argv or os.path.basename(argv[0]) not in DAEMONS:
        return False
    return pathspace is None or pathspace in argv


def zebra_ready(pathspace_dir: Path) -> bool:
    return (pathspace_dir / READY_FILE).exists()


def vtysh_argv(pathspace_dir: Path | None, commands: list[str]) -> list[str]:
    """vtysh for one router: through its own pathspace on the namespace runtime (None: the only FRR of a
    container). ``--config_dir`` points at that router's own directory so ``write file`` never touches
    the machine's /etc/frr."""
    argv = ["vtysh"]
    if pathspace_dir is not None:
        argv += ["--vty_socket", str(pathspace_dir), "--config_dir", str(pathspace_dir)]
    for c in commands:
        argv += ["-c", c]
    return argv


def write_vtysh_conf(pathspace_dir: Path) -> None:
    """vtysh of one router reads its vtysh.conf from the router's own directory (see vtysh_argv). Not
    integrated: ``write file`` makes each daemon rewrite its own -f file, the lab's copy of frr.conf."""
    (pathspace_dir / "vtysh.conf").write_text("no service integrated-vtysh-config\n")


def daemons_file(bfd: bool) -> dict:
    """Context for templates/frr/daemons.j2 (the containers' watchfrr)."""
    run = set(daemons(bfd))
    return {"enabled": [(d, d in run) for d in KNOWN],
            "options": {d: " ".join(["-A", "127.0.0.1", *DAEMON_ARGS.get(d, [])]) for d in DAEMONS}}


def preflight() -> None:
    """The FRR binaries a router needs, or one line saying how to install them."""
    for d in DAEMONS:
        if not (BIN / d).exists():
            raise RuntimeFailure(f"FRR not found ({BIN / d}): install Debian's frr (sudo ./bootstrap install)")
    if not shutil.which("vtysh"):
        raise RuntimeFailure("vtysh not found: install Debian's frr (sudo ./bootstrap install)")

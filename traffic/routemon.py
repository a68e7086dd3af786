"""Route monitor: the routers' own timestamps of a route change, to set beside the measured gap.

``ip -ts -o monitor route`` runs inside each watched router's namespace (through the runtime, so any
runtime works); it stamps every netlink route message with the wall clock, the same clock the probes use.
"""

from __future__ import annotations

import re
import subprocess
from datetime import datetime
from pathlib import Path

from hpnlab.runtime.base import Runtime

LINE = re.compile(r"^\[(?P<ts>[0-9T:.\-]+)\]\s+(?P<del>Deleted\s+)?(?P<type>blackhole\s+|unreachable\s+)?(?P<dst>[0-9./]+)\s(?P<rest>.*)$")


def start(rt: Runtime, node: str, out: Path) -> subprocess.Popen:
    f = open(out, "w")
    try:
        return subprocess.Popen(rt.exec_argv(node, ["ip", "-ts", "-o", "monitor", "route"]), stdout=f,
                                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        f.close()


def parse(text: str, node: str, prefixes: set[str] | None = None) -> list[dict]:
    """Route add/delete events for the given prefixes (host /32s written without the /32 by ip)."""
    events = []
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if not m or "table local" in m["rest"]:
            continue
        dst = m["dst"] if "/" in m["dst"] else f"{m['dst']}/32"
        if prefixes is not None and dst not in prefixes:
            continue
        events.append({"ts": datetime.fromisoformat(m["ts"]).timestamp(), "node": node, "prefix": dst,
                       "event": "del" if m["del"] else "add",
                       "via": " ".join(re.findall(r"dev (\S+)", m["rest"]))})
    return events

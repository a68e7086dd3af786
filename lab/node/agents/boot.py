"""A node configures itself from its own node.json: what a containerlab node (or a clabernetes pod)
does at start, so that ``containerlab deploy`` alone brings the lab up, with no controller reaching in.

Run by the image's init (docker/hpnlab-init) as ``python3 -m hpnlab.node.agents.boot``:

1. wait until every interface node.json names exists (containerlab wires the links after the
   container starts; clabernetes' tunnels come later still), reporting which are late;
2. give each interface its MAC from node.json (the host NIC's two ports share one; links written
   in containerlab's plain ``endpoints`` form carry none);
3. the same plan every runtime applies from outside (hpnlab.node.plan): sysctls, addresses and routes
   (``ip -batch``), link capacity (``tc -batch``), the ARP duplication ruleset (``nft -f``); then drop
   the management network's default route, so lab traffic never leaves through it;
4. routers: FRR with the image's own start script and the bound ``daemons`` file;
5. the node's agent (ToR, host, or for a host on a kernel 802.3ad bond the bond host agent).

Progress and the outcome go to /run/hpnlab/boot.json (bound to <node>/run outside), which the
controller polls; a failure is one line there, and in boot.log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from hpnlab.node import plan

NODE_JSON = Path(os.environ.get("HPNLAB_NODE_JSON", "/etc/hpnlab/node.json"))
RUN = Path(os.environ.get("HPNLAB_RUN", "/run/hpnlab"))
FRRINIT = "/usr/lib/frr/frrinit.sh"
WAIT_S = float(os.environ.get("HPNLAB_BOOT_WAIT", "600"))


IFF_UP = 0x1


def admin_up(name: str) -> bool:
    try:
        return bool(int(Path(f"/sys/class/net/{name}/flags").read_text(), 16) & IFF_UP)
    except (OSError, ValueError):
        return False


class Boot:
    def __init__(self, cfg: dict, run: Path = RUN):
        self.cfg, self.run = cfg, run
        self.steps: list[dict] = []
        self.t0 = time.time()
        self.kept: dict = {}  # facts every later report carries (e.g. what the kernel lacks)

    def report(self, done: bool = False, error: str | None = None, **extra) -> None:
        self.run.mkdir(parents=True, exist_ok=True)
        data = {"node": self.cfg["name"], "done": done, "error": error, "started": self.t0, "time": time.time(),
                "steps": self.steps, **self.kept, **extra}
        tmp = self.run / "boot.json.tmp"
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.run / "boot.json")

    def step(self, name: str, argv: list[str] | None = None, stdin: str | None = None) -> None:
        t = time.time()
        if argv:
            r = subprocess.run(argv, input=stdin, text=True, capture_output=True)
            if r.returncode != 0:
                raise RuntimeError(f"{name}: {' '.join(argv[:3])} exit {r.returncode}: "
                                   f"{(r.stderr or r.stdout).strip().splitlines()[-1:] or ''}")
        self.steps.append({"step": name, "s": round(time.time() - t, 3)})
        self.report(waiting=None)

    def wait_interfaces(self) -> None:
        """Until every interface is there AND containerlab is done with it. containerlab makes a link end
        in the root namespace, moves it here, then renames it, sets its MAC and sets it up, in that order
        (containerlab links/link.go SetNameMACAndUpInterface); a name alone is not the end of it: a port
        enslaved to a bond before containerlab's "set up" made that step fail. Admin up is its last step."""
        want = [i["name"] for i in self.cfg["interfaces"]]
        deadline = time.monotonic() + WAIT_S
        last = 0.0
        while True:
            missing = [n for n in want if not admin_up(n)]
            if not missing:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"interfaces {', '.join(missing[:4])} never appeared (or were never set up) "
                                   f"within {WAIT_S:g} s")
            if time.monotonic() - last > 2:
                self.report(waiting=f"{len(missing)}/{len(want)} interfaces: {', '.join(missing[:4])}")
                last = time.monotonic()
            time.sleep(0.1)
        self.step(f"{len(want)} interfaces present and up")

    def set_macs(self) -> None:
        """Each interface's MAC (links in containerlab's brief form carry none) and the lab's MTU
        (containerlab's default is 9500, a VXLAN link's its parent's less 50)."""
        lines = []
        for i in self.cfg["interfaces"]:
            sysfs = Path(f"/sys/class/net/{i['name']}")
            if (sysfs / "address").read_text().strip() != i["mac"]:
                lines.append(f"link set dev {i['name']} address {i['mac']}")
            if int((sysfs / "mtu").read_text()) != plan.MTU:
                lines.append(f"link set dev {i['name']} mtu {plan.MTU}")
        self.step(f"MACs and MTU ({len(lines)} set)", ["ip", "-batch", "-"] if lines else None,
                  "\n".join(lines) + "\n")

    def sysctls(self) -> None:
        """An unprivileged container's /proc/sys is read-only; a procfs of its own (CAP_SYS_ADMIN) writes
        the same per-namespace net.* values."""
        root, mounted = Path("/proc/sys"), None
        if not os.access("/proc/sys/net", os.W_OK):
            mounted = Path("/run/hpnlab-proc")
            mounted.mkdir(exist_ok=True)
            r = subprocess.run(["mount", "-t", "proc", "proc", str(mounted)], capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"sysctls: /proc/sys is read-only and no procfs could be mounted "
                                   f"({r.stderr.strip()}); give the node CAP_SYS_ADMIN or run it privileged")
            root = mounted / "sys"
        # A key this kernel lacks (e.g. the hash seed before 6.11) is left out and reported, not fatal:
        # hpnlab.machine.kernel says what the lab runs without; a container runtime would refuse it in sysctls:.
        lacks = [k for k in plan.OPTIONAL_SYSCTLS if not Path(root, k.replace(".", "/")).exists()]
        if lacks:
            self.kept["kernel_lacks"] = lacks
        try:
            for key, value in plan.sysctls(self.cfg, lacks).items():
                Path(root, key.replace(".", "/")).write_text(f"{value}\n")
        finally:
            if mounted:
                subprocess.run(["umount", str(mounted)], capture_output=True)
        self.step("sysctls" + (f" (this kernel lacks {', '.join(lacks)})" if lacks else ""))

    def configure(self, driver: str) -> None:
        self.sysctls()
        self.step("addresses and routes", ["ip", "-batch", "-"], "\n".join(plan.ip_batch(self.cfg, driver)) + "\n")
        tc = plan.tc_batch(self.cfg)
        self.step("link capacity", ["tc", "-batch", "-"] if tc else None, "\n".join(tc) + "\n")
        rules = plan.nft_ruleset(self.cfg)
        self.step("nftables", ["nft", "-f", "-"] if rules else None, rules)
        for fam in ("-4", "-6"):  # the management network's default route: lab traffic must not use it
            subprocess.run(["ip", fam, "route", "flush", "exact", "default"], capture_output=True)
        self.step("management default route dropped")

    def start(self, driver: str) -> None:
        if self.cfg["role"] != "host":
            self.step("FRR", [FRRINIT, "start"])
        module = plan.agent_module(self.cfg, driver)
        if module:
            with open(self.run / "agent.log", "a") as log:
                subprocess.Popen([sys.executable, "-m", module, str(NODE_JSON), "--status", str(self.run / "status.json")],
                                 stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            self.step(f"agent {module}")

    def main(self) -> int:
        try:
            driver = plan.host_driver(self.cfg.get("driver") or "auto", plan.bonding_available())
            self.report(waiting="starting", driver=driver)
            self.wait_interfaces()
            self.set_macs()
            self.configure(driver)
            self.start(driver)
        except Exception as e:  # one line in boot.json; the container stays up for inspection
            self.report(error=f"{e.__class__.__name__}: {e}")
            print(f"hpnlab boot {self.cfg['name']}: {e}", file=sys.stderr)
            return 1
        self.report(done=True, driver=driver, seconds=round(time.time() - self.t0, 3))
        return 0


def main() -> int:
    try:
        cfg = json.loads(NODE_JSON.read_text())
    except (OSError, ValueError) as e:
        print(f"hpnlab boot: {NODE_JSON}: {e}", file=sys.stderr)
        return 1
    return Boot(cfg).main()


if __name__ == "__main__":
    sys.exit(main())

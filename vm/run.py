#!/usr/bin/env python3
"""Run hpnlab on the kernels users have, in QEMU virtual machines: Debian 12's stock kernel (6.1) and
bookworm-backports' (6.12), from one Debian 12 image (vm/build-image.sh, cached).

    sudo python3 vm/run.py                       both kernels, the default steps
    sudo python3 vm/run.py --kernel stock        one of them ("stock", "backports" or a release)
    sudo python3 vm/run.py --steps up,kernel-tests --out /tmp/vm
    sudo python3 vm/run.py --list                the steps and what each runs

Each VM gets the checkout as a fresh clone would have it (tracked and untracked, not ignored files), a
throw-away overlay of the image, and runs the steps (vm/guest.sh); it writes, per kernel, every step's
log, a JUnit file for the test steps and summary.json to OUT/<kernel>/out/, prints one line per kernel,
and writes OUT/vm-results.json. Where QEMU, debootstrap or the image cannot be had it says why and exits
3 (a test that calls it skips).

Acceleration: KVM where it boots the stock kernel, else QEMU's TCG (software: slower, so the VM checks
function, not timing). On these project machines /dev/kvm is paravirtual and a stock kernel never
reaches init under it; the first run finds that out (a boot with a deadline) and remembers it per
host kernel in the cache.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = Path(os.environ.get("HPNLAB_VM_CACHE", "/var/cache/hpnlab-vm"))
UNAVAILABLE = 3  # exit code: the VM cannot be had on this machine (the reason is printed)

# name -> (timeout s, command run in the guest's checkout). Fixed strings: nothing from the user reaches
# the guest's shell. $OUT is the step's output folder.
STEPS: dict[str, tuple[int, str, str]] = {
    "info": (60, "uname -a; python3 --version; vtysh --version | head -1; ls /lib/modules",
             "what the guest is (kernel, Python, FRR)"),
    "up": (1500, "./bootstrap up --timeout 600",
           "the README's first command from a fresh clone: install (offline: Debian packages are in the "
           "image, wheels in /opt/wheels), bring up the default lab, print the verify table"),
    "up-keep": (1500, "./bootstrap install && .venv/bin/hpnlab up --keep --timeout 120",
                "install, then bring up the default lab and leave it up even if unhealthy (for 'diagnose')"),
    "diagnose": (300, "vm/diagnose.sh hpn", "dump every node's addresses, routes, neighbours, nftables, bonds "
                                            "and the agents' logs"),
    "doctor": (120, ".venv/bin/hpnlab doctor --json > $OUT/doctor.json; cat $OUT/doctor.json",
               "the kernel feature check, as JSON"),
    "readme": (300, "sudo hpnlab status && sudo hpnlab exec s0h0 -- ping -c 3 -I 10.0.0.2 10.0.2.2",
               "the README's next commands, through sudo's secure_path (the link ./bootstrap made)"),
    # --wait: under TCG a VM is ~10x slower, and BFD's 300 ms can flap a session while the machine is busy
    "verify": (300, "sudo hpnlab verify --wait 90 --json > $OUT/verify.json; rc=$?; "
                    ".venv/bin/python -c \"import json,sys; c=json.load(open('$OUT/verify.json')); "
                    "print(sum(x['ok'] for x in c), 'of', len(c), 'checks ok')\"; exit $rc",
               "hpnlab verify on the lab 'up' left running"),
    # every interface of a host (its ports and bonds), a ToR and an agg sends MTU frames: GSO capped at one
    # segment by the nodes' ip -batch plan (hpnlab.node.plan.offload_lines), which this kernel must accept
    "offloads": (120, "for n in s0h0 s0r0a agg0-0; do ip -n hpn-$n -d -j link show; done | python3 -c "
                      "\"import json,sys; links=[(l['ifname'], l.get('gso_max_segs')) for ln in sys.stdin "
                      "for l in json.loads(ln)]; print(links); sys.exit(any(n != 'lo' and g != 1 for n, g in links))\"",
                 "the gso_max_segs of every interface of s0h0, s0r0a and agg0-0 in the lab 'up' left running"),
    "mtu-test": (1500, "./bootstrap test tests/test_offloads_lab.py -x -q -rP --junitxml=$OUT/mtu-test.xml",
                 "impair loss=1 drops 1 % of MTU frames across the fabric (the lab test; not a default step)"),
    # prio and ets are modules this project's CI kernel lacks (the lab test skips them there); a stock
    # Debian kernel has both, so this step is where their strict priority is measured
    # the port at 5 Mbit/s, not the suite's 20: under TCG two Python senders could not fill 20 (2.4 and 5.8
    # Mbit/s in two runs), so the test read the emulator's CPU, not the scheduler; every scheduler runs
    "qos-test": (1500, "HPNLAB_QOS_TEST_MBIT=5 ./bootstrap test tests/test_qos_lab.py -q -rP "
                       "--junitxml=$OUT/qos-test.xml",
                 "switch QoS on a real lab under each scheduler the kernel has (htb, prio, ets), the port at 5 "
                 "Mbit/s: the higher DSCP class takes >= 80 % of a shaped port, the lower one gets it back (the "
                 "lab test; not a default step)"),
    "down": (300, "sudo hpnlab down && sudo hpnlab down --lab hpn", "hpnlab down (twice: idempotent)"),
    "link-failure": (2400, ".venv/bin/hpnlab run experiments/host-drivers.yml -n 1 --out /tmp/lf && "
                           "cp /tmp/lf/summary.txt /tmp/lf/results.json $OUT/ && cat /tmp/lf/summary.txt",
                     "the access-link failure with the kernel bond and the userspace host agent, -n 1"),
    "kernel-tests": (2400, "./bootstrap test -m kernel -x -q -rP --junitxml=$OUT/kernel-tests.xml",
                     "the suite's kernel subset (pytest -m kernel)"),
}
DEFAULT_STEPS = ["up", "doctor", "readme", "verify", "offloads", "down", "kernel-tests", "link-failure", "qos-test"]
KERNELS = {"stock": "6.1.", "backports": "6.12."}


def say(msg: str) -> None:
    print(f"vm: {msg}", file=sys.stderr, flush=True)


class Unavailable(Exception):
    pass


# --- the image --------------------------------------------------------------------------------------------
def recipe_hash() -> str:
    """The image depends on its recipe, the lab's Debian packages and the Python dependencies."""
    import tomllib

    h = hashlib.sha256((HERE / "build-image.sh").read_bytes())
    h.update(subprocess.run([str(ROOT / "bootstrap"), "packages"], capture_output=True, text=True).stdout.encode())
    p = tomllib.loads((ROOT / "pyproject.toml").read_text())
    h.update(json.dumps([p["project"]["dependencies"], p["project"].get("optional-dependencies"),
                         p["build-system"]["requires"]], sort_keys=True).encode())
    return h.hexdigest()[:16]


def image(rebuild: bool = False) -> Path:
    for tool, pkg in (("qemu-system-x86_64", "qemu-system-x86"), ("qemu-img", "qemu-utils"),
                      ("debootstrap", "debootstrap"), ("mkfs.ext4", "e2fsprogs")):
        if not shutil.which(tool):
            raise Unavailable(f"{tool} is missing (Debian package {pkg}; './bootstrap test' installs it)")
    if os.geteuid() != 0:
        raise Unavailable("the VM harness needs root (debootstrap, the image's files)")
    CACHE.mkdir(parents=True, exist_ok=True)
    d = CACHE / recipe_hash()
    with open(CACHE / ".lock", "w") as lock:  # one build at a time per machine
        fcntl.flock(lock, fcntl.LOCK_EX)
        if rebuild or not (d / "image.json").exists():
            say(f"building the Debian 12 image in {d} (debootstrap; a few minutes, cached afterwards)")
            t0 = time.monotonic()
            # the wheels come from this Python's pip (the project's venv has one; a fresh system python3 may not)
            r = subprocess.run([str(HERE / "build-image.sh"), str(d)], stdout=sys.stderr,
                               env={**os.environ, "HPNLAB_VM_PYTHON": os.environ.get("HPNLAB_VM_PYTHON", sys.executable)})
            if r.returncode != 0:
                raise Unavailable(f"the image could not be built (vm/build-image.sh exit {r.returncode}; "
                                  f"is Debian's archive reachable?)")
            say(f"image built in {time.monotonic() - t0:.0f} s")
            for old in CACHE.iterdir():  # images of older recipes
                if old.is_dir() and old != d and len(old.name) == 16:
                    shutil.rmtree(old, ignore_errors=True)
    return d


def pick_kernels(img: Path, wanted: list[str]) -> list[str]:
    have = json.loads((img / "image.json").read_text())["kernels"]
    out = []
    for w in wanted:
        prefix = KERNELS.get(w, w)
        match = [k for k in have if k.startswith(prefix)]
        if not match:
            raise SystemExit(f"vm: error: no kernel '{w}' in the image (it has {', '.join(have)})")
        out.append(match[0])
    return out


# --- the checkout, as a fresh clone holds it --------------------------------------------------------------
def source_tar(dest: Path) -> int:
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=True).stdout.split(b"\0")
    n = 0
    with tarfile.open(dest, "w") as tar:
        for f in files:
            p = ROOT / f.decode()
            if f and (p.is_file() or p.is_symlink()):
                tar.add(p, arcname=f.decode(), recursive=False)
                n += 1
        # the tar has no .git: the commit it was made from goes with it, for the VM's results' provenance
        # (hpnlab.instrument.provenance reads this file where git cannot answer)
        stamp = json.dumps(source_commit()).encode()
        info = tarfile.TarInfo(".hpnlab-source.json")
        info.size, info.mtime = len(stamp), int(time.time())
        tar.addfile(info, io.BytesIO(stamp))
    return n


def source_commit() -> dict:
    """{commit, dirty} of this checkout (dirty: tracked files differ from the commit), as hpnlab.instrument.provenance
    reports a checkout; "unknown" where git cannot say."""
    def git(*argv: str) -> str | None:
        r = subprocess.run(["git", "-C", str(ROOT), *argv], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None
    commit = git("rev-parse", "HEAD")
    status = git("--no-optional-locks", "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit or "unknown", "dirty": bool(status) if status is not None else "unknown"}


# --- one VM -------------------------------------------------------------------------------------------------
def qemu_argv(img: Path, rel: str, overlay: Path, rundir: Path, console: Path, accel: str) -> list[str]:
    kdir = img / "kernels" / rel
    cmdline = "root=/dev/vda rw console=ttyS0 init=/sbin/hpnlab-vm-init panic=-1 loglevel=4 net.ifnames=0"
    return ["qemu-system-x86_64", "-machine", "q35",
            *(["-accel", "kvm", "-cpu", "host"] if accel == "kvm" else ["-accel", "tcg,thread=multi", "-cpu", "max"]),
            "-smp", str(os.cpu_count() or 2), "-m", os.environ.get("HPNLAB_VM_MEMORY", "6144"),
            "-nodefaults", "-display", "none", "-no-reboot",
            "-kernel", str(kdir / "vmlinuz"), "-initrd", str(kdir / "initrd.img"), "-append", cmdline,
            "-drive", f"file={overlay},if=virtio,format=qcow2,cache=unsafe",
            "-virtfs", f"local,path={rundir},mount_tag=run,security_model=none,id=run",
            "-device", "virtio-rng-pci", "-serial", f"file:{console}"]


def boot(img: Path, rel: str, rundir: Path, accel: str, timeout: float, first_line_within: float | None = None) -> str:
    """Boot one VM and follow its console until it powers off. Returns 'done', 'timeout' or 'no-start'
    (no "guest started" line within first_line_within seconds)."""
    overlay = rundir / "overlay.qcow2"
    overlay.unlink(missing_ok=True)
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(img / "rootfs.img"),
                    str(overlay)], check=True)
    console = rundir / "console.log"
    console.write_text("")
    proc = subprocess.Popen(qemu_argv(img, rel, overlay, rundir, console, accel),
                            stdout=subprocess.DEVNULL, stderr=open(rundir / "qemu.log", "w"))
    t0 = time.monotonic()
    seen, started, outcome = 0, False, "done"
    try:
        while proc.poll() is None:
            time.sleep(1)
            text = console.read_text(errors="replace")
            for line in text[seen:].splitlines():
                if line.startswith("hpnlab-vm:") or line.startswith("    "):
                    say(f"[{rel} {time.monotonic() - t0:5.0f}s] {line.removeprefix('hpnlab-vm: ')}")
                started = started or "guest started" in line
            seen = text.rfind("\n") + 1 if "\n" in text else seen
            if first_line_within and not started and time.monotonic() - t0 > first_line_within:
                outcome = "no-start"
                break
            if time.monotonic() - t0 > timeout:
                outcome = "timeout"
                break
        if not started and outcome == "done":
            outcome = "no-start"  # QEMU ended before the guest said a word (e.g. KVM refused the CPU)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # our own QEMU, by its PID
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        overlay.unlink(missing_ok=True)
    return outcome


def choose_accel(img: Path, rel: str, rundir: Path, want: str) -> str:
    if want != "auto":
        return want
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    memo = CACHE / "accel.json"
    key = f"{os.uname().release} {rel}"
    known = json.loads(memo.read_text()) if memo.exists() else {}
    if key not in known:
        say(f"trying KVM for {rel} (falls back to TCG if the guest does not start within 90 s)")
        (rundir / "steps.txt").write_text("")
        known[key] = "kvm" if boot(img, rel, rundir, "kvm", 120, first_line_within=90) == "done" else "tcg"
        memo.write_text(json.dumps(known, indent=1))
        shutil.rmtree(rundir / "out", ignore_errors=True)
    return known[key]


def junit_counts(path: Path) -> dict | None:
    if not path.exists():
        return None
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    c: dict = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    c["passed"] = c["tests"] - c["failures"] - c["errors"] - c["skipped"]
    # which tests failed and how: the step's log keeps only its tail, where -rP's passed output comes last
    c["failed"] = [{"test": f"{case.get('classname', '')}::{case.get('name', '')}",
                    "message": (bad.get("message") or "")[:500], "detail": (bad.text or "")[-3000:]}
                   for case in root.iter("testcase") for bad in case if bad.tag in ("failure", "error")]
    return c


# Under TCG a guest runs many times slower than its host, how many depends on the host (the same steps took
# 195 s on one CI host and 523 s on another), and on the slower ones the default lab's BFD (100 ms x 3, most
# of the lab's idle CPU) starves bgpd: sessions flap, the lab never verifies. The VM
# checks function on a stock kernel, not timing, so under TCG every lab in the guest runs BFD ten times
# slower (HPNLAB_SPEC_OVERRIDES, which every spec read takes); under KVM the specs run as written.
TCG_SPEC_OVERRIDES = {"bfd": {"interval_ms": 1000}}


def spec_overrides(accel: str) -> dict:
    return TCG_SPEC_OVERRIDES if accel == "tcg" else {}


def run_kernel(img: Path, rel: str, steps: list[str], out: Path, accel: str, timeout: float) -> dict:
    rundir = out / rel
    shutil.rmtree(rundir, ignore_errors=True)
    rundir.mkdir(parents=True)
    shutil.copy(HERE / "guest.sh", rundir / "guest.sh")
    n = source_tar(rundir / "src.tar")
    used = choose_accel(img, rel, rundir, accel)
    (rundir / "steps.txt").write_text("".join(f"{s}\t{STEPS[s][0]}\t{STEPS[s][1]}\n" for s in steps))
    over = spec_overrides(used)
    (rundir / "env").write_text(f"HPNLAB_SPEC_OVERRIDES={shlex.quote(json.dumps(over))}\n" if over else "")
    say(f"{rel}: booting ({used}, {n} files of the checkout, steps {', '.join(steps)}"
        f"{f'; every spec with {json.dumps(over)}' if over else ''})")
    t0 = time.monotonic()
    outcome = boot(img, rel, rundir, used, timeout)
    res = {"kernel": rel, "accel": used, "spec_overrides": over, "outcome": outcome, "seconds": round(time.monotonic() - t0, 1),
           "steps": [], "out": str(rundir / "out")}
    summary = rundir / "out" / "summary.json"
    if summary.exists():
        res["steps"] = json.loads(summary.read_text())["steps"]
    elif (rundir / "out" / "steps.jsonl").exists():
        res["steps"] = [json.loads(ln) for ln in (rundir / "out" / "steps.jsonl").read_text().splitlines() if ln]
    for s in res["steps"]:
        counts = junit_counts(rundir / "out" / f"{s['step']}.xml")
        if counts:
            s["tests"] = counts
    done = {s["step"] for s in res["steps"]}
    res["ok"] = outcome == "done" and done == set(steps) and all(s["rc"] == 0 for s in res["steps"])
    return res


def line(res: dict) -> str:
    parts = []
    for s in res["steps"]:
        t = s.get("tests")
        extra = f" ({t['passed']} passed, {t['failures'] + t['errors']} failed, {t['skipped']} skipped)" if t else ""
        parts.append(f"{s['step']} {'ok' if s['rc'] == 0 else 'FAILED exit ' + str(s['rc'])} {s['seconds']:.0f}s{extra}")
    tail = "" if res["outcome"] == "done" else f"; VM {res['outcome']}"
    failed = [f"\n  {f['test']}: {f['message'].splitlines()[0] if f['message'] else 'failed'}"
              for s in res["steps"] for f in (s.get("tests") or {}).get("failed", [])]
    over = f"; {json.dumps(res['spec_overrides'])}" if res.get("spec_overrides") else ""
    return f"{res['kernel']} [{res['accel']}{over}] {'OK' if res['ok'] else 'FAILED'} in {res['seconds']:.0f}s: " \
           f"{'; '.join(parts) or 'no step ran'}{tail}{''.join(failed)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="vm/run.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="all", help="stock (Debian 12's 6.1), backports (6.12), a release "
                                                    "from the image, or all (default)")
    ap.add_argument("--steps", default=",".join(DEFAULT_STEPS), help="comma-separated, run in this order "
                                                                     f"(default {','.join(DEFAULT_STEPS)}; --list)")
    ap.add_argument("--out", default=str(CACHE / "runs"), help="where each kernel's logs and results go "
                                                               "(default %(default)s)")
    ap.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto",
                    help="auto (default): KVM where a stock kernel starts under it, else TCG")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per VM (default %(default)s)")
    ap.add_argument("--rebuild", action="store_true", help="build the image again")
    ap.add_argument("--list", action="store_true", help="list the steps and exit")
    args = ap.parse_args(argv)
    if args.list:
        for name, (tmo, _, what) in STEPS.items():
            print(f"{name:<13} {what} (timeout {tmo} s)")
        return 0
    steps = [s for s in args.steps.split(",") if s]
    bad = [s for s in steps if s not in STEPS]
    if bad:
        print(f"vm/run.py: error: unknown step '{bad[0]}'; choose from {', '.join(STEPS)}", file=sys.stderr)
        return 2
    try:
        img = image(args.rebuild)
    except Unavailable as e:
        print(f"vm/run.py: unavailable: {e}", file=sys.stderr)
        return UNAVAILABLE
    wanted = list(KERNELS) if args.kernel == "all" else args.kernel.split(",")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prov = {**source_commit(), "host_kernel": os.uname().release}  # the code the VMs ran (its stamp's commit)
    results = [{**run_kernel(img, rel, steps, out, args.accel, args.timeout), "provenance": prov}
               for rel in pick_kernels(img, wanted)]
    (out / "vm-results.json").write_text(json.dumps(results, indent=1))
    for r in results:
        print(line(r))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

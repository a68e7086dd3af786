"""Docker for the containerlab runtime: the engine check, and the node images (``hpnlab images``).

``build`` runs ``docker build`` on docker/Dockerfile once per role, with the project root as context.
``base`` makes a Debian base without any image registry (debootstrap -> ``docker import``), holding
every package both images need, so ``build --base`` then fetches nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from hpnlab.errors import RuntimeFailure, SpecError
from hpnlab.generate.render import IMAGES  # noqa: F401 (the images this module builds)
from hpnlab.model.paths import checkout_root
from hpnlab.machine.proc import run


ROOT = checkout_root()  # the image build context: docker/ and the in-node code (lab/)
BASE_TAG = "hpnlab/base:bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BUILD_TIMEOUT = 1800.0


def docker_dir() -> Path:
    if ROOT is None:
        raise RuntimeFailure("the node images are built from a source checkout of hpnlab (docker/, lab/): "
                             "clone the project and run 'hpnlab images build' there")
    return ROOT / "docker"


def packages(role: str) -> list[str]:
    return (docker_dir() / role / "packages").read_text().split()


def build_argv(role: str, base: str | None) -> list[str]:
    argv = ["docker", "build", "-t", IMAGES[role], "-f", str(docker_dir() / "Dockerfile"), "--build-arg", f"ROLE={role}"]
    if base:
        argv += ["--build-arg", f"BASE={base}"]
    return argv + [str(ROOT)]


def debootstrap_argv(target: Path, mirror: str, suite: str = "bookworm") -> list[str]:
    include = sorted(set(packages("router")) | set(packages("host")))
    return ["debootstrap", "--variant=minbase", f"--include={','.join(include)}", suite, str(target), mirror]


def need_docker(hint: str = "") -> None:
    """The docker CLI and a reachable engine, or a one-line error saying what to do (plus ``hint``)."""
    if not shutil.which("docker"):
        raise RuntimeFailure(f"docker not found: install Docker (Debian: apt-get install docker.io){hint}")
    r = run(["docker", "info", "--format", "{{.ServerVersion}}"], check=False, timeout=30)
    if r.returncode != 0:
        raise RuntimeFailure(f"the Docker engine is not reachable ({(r.stderr.strip().splitlines() or ['?'])[-1]}): "
                             f"start it (systemctl start docker){hint}")


def image_exists(tag: str) -> bool:
    return run(["docker", "image", "inspect", tag], check=False, timeout=30).returncode == 0


def _stream(argv: list[str], what: str, verbose: bool, timeout: float = BUILD_TIMEOUT, **kw) -> None:
    """Run a long step, echoing its output when verbose; on failure, show its last lines."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    tail: list[str] = []
    try:
        for line in p.stdout:
            tail = (tail + [line.rstrip()])[-8:]
            if verbose:
                print(f"  | {line.rstrip()}", file=sys.stderr)
        p.wait(timeout=timeout)
    except BaseException:
        p.kill()
        p.wait()
        raise
    if p.returncode != 0:
        detail = " / ".join(t for t in tail[-3:] if t) or "no output"
        raise RuntimeFailure(f"{what}: exit {p.returncode}: {detail}")


def build(base: str | None, progress, verbose: bool = False) -> list[str]:
    need_docker()
    if base and not image_exists(base):
        hint = " (make it with 'sudo hpnlab images base')" if base == BASE_TAG else ""
        raise SpecError(f"--base '{base}': no such local image{hint}")
    env = {**os.environ}
    if not shutil.which("docker-buildx") and not Path("/usr/libexec/docker/cli-plugins/docker-buildx").exists():
        env["DOCKER_BUILDKIT"] = "0"  # the classic builder, where the buildx plugin is not installed
    for role in ("router", "host"):
        progress(f"building {IMAGES[role]} (docker/Dockerfile, ROLE={role})" + (f" on {base}" if base else ""))
        _stream(build_argv(role, base), f"docker build {IMAGES[role]}", verbose, env=env)
    return list(IMAGES.values())


def make_base(tag: str, mirror: str, progress, verbose: bool = False) -> str:
    if os.geteuid() != 0:
        raise RuntimeFailure("'hpnlab images base' needs root (debootstrap): run it with sudo")
    if not shutil.which("debootstrap"):
        raise RuntimeFailure("debootstrap not found: install Debian's debootstrap (apt-get install debootstrap)")
    need_docker()
    work = Path(tempfile.mkdtemp(prefix="hpnlab-base.", dir="/var/tmp"))
    try:
        root = work / "rootfs"
        progress(f"debootstrap {mirror} into {root} (a minute or two)")
        _stream(debootstrap_argv(root, mirror), "debootstrap", verbose)
        progress(f"docker import -> {tag}")
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        try:
            imp = subprocess.run(["docker", "import", "-", tag], stdin=tar.stdout, capture_output=True, text=True,
                                 timeout=600)
        finally:
            tar.stdout.close()
            tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise RuntimeFailure(f"docker import: exit {imp.returncode}: {imp.stderr.strip()[-200:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tag

"""``hpnlab images build|base|list``: the node images for --runtime clab (the work is hpnlab.runtime.containers)."""

from __future__ import annotations

import json
import sys

from hpnlab.runtime import containers
from hpnlab.machine.progress import Progress
from hpnlab.runtime.containers import IMAGES


def cmd(args) -> int:
    progress = Progress()
    if args.action == "build":
        built = containers.build(args.base, progress, args.verbose)
        progress(f"built {', '.join(built)} (use: sudo hpnlab up --runtime clab)")
    elif args.action == "base":
        tag = containers.make_base(args.tag, args.mirror, progress, args.verbose)
        progress(f"base image {tag} ready: hpnlab images build --base {tag}")
    else:
        containers.need_docker()
        rows = [{"role": r, "image": t, "present": containers.image_exists(t)} for r, t in IMAGES.items()]
        if args.json:
            json.dump(rows, sys.stdout, indent=1)
            print()
        else:
            for r in rows:
                print(f"{r['role']:<7} {r['image']:<24} {'present' if r['present'] else 'missing (hpnlab images build)'}")
        return 0 if all(r["present"] for r in rows) else 1
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("images", help="build the router and host images for --runtime clab",
                       description="build: docker build docker/Dockerfile for the router and the host (tags "
                                   f"{', '.join(IMAGES.values())}). base: make a Debian base image with "
                                   "debootstrap + docker import, for machines without an image registry. "
                                   "list: which images are present.")
    p.add_argument("action", choices=("build", "base", "list"),
                   help="build: the router and host images; base: a Debian base image with debootstrap (no "
                        "registry needed); list: the images and whether each exists")
    p.add_argument("--base", help="build on this local base image instead of debian:bookworm-slim "
                                  f"(e.g. {containers.BASE_TAG} from 'hpnlab images base')")
    p.add_argument("--tag", default=containers.BASE_TAG, help=f"tag for 'base' (default {containers.BASE_TAG})")
    p.add_argument("--mirror", default=containers.DEFAULT_MIRROR, help=f"Debian mirror for 'base' (default {containers.DEFAULT_MIRROR})")
    p.add_argument("--verbose", "-v", action="store_true", help="show docker/debootstrap output")
    p.add_argument("--json", action="store_true", help="'list' as JSON")
    p.set_defaults(func=cmd)

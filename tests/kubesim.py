"""A stand-in ``kubectl`` for tests (as tests/clabsim.py stands in for containerlab): it accepts exactly
the commands hpnlab's c9s runtime gives and runs ``exec`` inside the node the command names, on a lab
of network namespaces, so faults, probes and captures over the kubectl channel really reach a node.

    kubectl [--context C] [-n NS] exec -i deploy/<lab>-<node> -- docker exec -i clab-<lab>-<node> CMD...
        -> ip netns exec <lab>-<node> CMD...   (python3 -> this interpreter, which has hpnlab.node)
    kubectl ... apply|delete -f DIR, get ... -o name   -> recorded, nothing to do

Every call is appended to $KUBESIM_LOG (one JSON list per line) so tests can check the argv.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> int:
    log = os.environ.get("KUBESIM_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(argv) + "\n")
    args = list(argv)
    while args and args[0] in ("--context", "-n"):
        args = args[2:]
    if not args:
        sys.stderr.write("kubesim: no command\n")
        return 2
    if args[0] in ("apply", "delete", "get"):
        return 0
    if args[0] != "exec":
        sys.stderr.write(f"kubesim: unsupported command {args[0]}\n")
        return 2
    # exec -i|-it deploy/<lab>-<node> -- docker exec -i|-it <container> CMD...
    if len(args) < 8 or args[3] != "--" or args[4:6] != ["docker", "exec"] or not args[2].startswith("deploy/"):
        sys.stderr.write(f"kubesim: unexpected exec form {args}\n")
        return 2
    ns = args[2][len("deploy/"):]
    lab, node = ns.split("-", 1)
    if args[7] != f"clab-{lab}-{node}":
        sys.stderr.write(f"kubesim: container {args[7]} is not deploy {ns}'s node\n")
        return 2
    cmd = args[8:]
    if cmd and cmd[0] == "python3":
        cmd[0] = sys.executable
    os.execvp("ip", ["ip", "netns", "exec", ns, *cmd])
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

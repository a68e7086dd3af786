"""A stand-in ``kubectl`` for tests (as tests/clabsim.py stands in for containerlab): it accepts exactly
the commands hpnlab's c9s runtime gives, with only the names clabernetes really creates, and runs
``exec`` inside the node the command names, on a lab of network namespaces, so faults, probes and
captures over the kubectl channel really reach a node.

    kubectl [--context C] [-n NS] exec -i deploy/<D> -- docker exec -i <node> CMD...
        -> ip netns exec $KUBESIM_LAB-<node> CMD...   (python3 -> this interpreter, which has hpnlab.node)
    kubectl ... apply -f DIR     -> the objects are parsed as clabernetes parses them (below)
    kubectl ... delete|get ...   -> recorded, nothing to do

What clabernetes creates, for KUBESIM_API (default c9s.run), each rule from its source:
- the launcher Deployment D of a node: the node's name on c9s.run (0.7+: Node objects are named after the
  containerlab nodes and each Deployment after its Node; clabernetes/clabernetes 354b414,
  controllers/topology/render.go RenderNodes, controllers/node/deployment.go); ``<topology>-<node>`` on
  clabernetes.containerlab.dev (srl-labs/clabernetes 1cc0cbe, controllers/topology/deployment.go);
- the node's container in the launcher: the node's name (the launcher's containerlab topology has
  ``prefix: ""``: 354b414 launcher/materialize.go, 1cc0cbe controllers/topology/definitioncontainerlab.go);
- a Topology's containerlab definition is read into a model of only defaults, kinds, nodes and links
  (354b414 util/containerlab/types.go): ``groups:`` and ``group:`` are dropped, and a node left with no
  kind fails the launcher's containerlab with ``kind "" is not supported``.

Every call is appended to $KUBESIM_LOG (one JSON list per line) so tests can check the argv.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

DEPLOYMENT = {"c9s.run": "{node}", "clabernetes.containerlab.dev": "{topology}-{node}"}


def err(msg: str) -> int:
    sys.stderr.write(f"kubesim: {msg}\n")
    return 1


def _docs(path: Path) -> list[dict]:
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]


def apply(path: Path) -> int:
    """Parse what would reach clabernetes; fail where its parser or the launcher would."""
    for doc in _docs(path):
        kind = doc.get("kind")
        if kind == "Topology":
            clab = yaml.safe_load(doc["spec"]["definition"]["containerlab"])
            topo = clab.get("topology") or {}
            kept = {k: v for k, v in topo.items() if k in ("defaults", "kinds", "nodes", "links")}  # groups: gone
            default_kind = (kept.get("defaults") or {}).get("kind", "")
            for name, n in (kept.get("nodes") or {}).items():
                if not (n or {}).get("kind", default_kind):
                    return err(f"Topology {doc['metadata']['name']}: node {name}: kind \"\" is not supported")
                if not (n or {}).get("image") and not (kept.get("defaults") or {}).get("image"):
                    return err(f"Topology {doc['metadata']['name']}: node {name}: no image")
        elif kind == "Node":
            if not doc["spec"].get("kind") or not doc["spec"].get("image"):
                return err(f"Node {doc['metadata']['name']}: kind \"{doc['spec'].get('kind', '')}\" / no image")
    return 0


def main(argv: list[str]) -> int:
    log = os.environ.get("KUBESIM_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(argv) + "\n")
    args = list(argv)
    while args and args[0] in ("--context", "-n"):
        args = args[2:]
    if not args:
        return err("no command")
    if args[0] == "apply" and len(args) >= 3 and args[1] == "-f":
        return apply(Path(args[2]))
    if args[0] in ("delete", "get"):
        return 0
    if args[0] != "exec":
        return err(f"unsupported command {args[0]}")
    # exec -i|-it deploy/<deployment> -- docker exec -i|-it <container> CMD...
    if len(args) < 8 or args[3] != "--" or args[4:6] != ["docker", "exec"] or not args[2].startswith("deploy/"):
        return err(f"unexpected exec form {args}")
    lab = os.environ.get("KUBESIM_LAB")
    if not lab:
        return err("KUBESIM_LAB (the lab whose namespaces stand for the pods) is not set")
    api = os.environ.get("KUBESIM_API", "c9s.run")
    node = args[7]
    want = "deploy/" + DEPLOYMENT[api].format(topology=lab, node=node)
    if args[2] != want:
        return err(f'Error from server (NotFound): deployments.apps "{args[2][len("deploy/"):]}" not found '
                   f"(clabernetes {api} names node {node}'s launcher {want})")
    if not Path(f"/run/netns/{lab}-{node}").exists():
        return err(f'Error response from daemon: No such container: {node}')
    cmd = args[8:]
    if cmd and cmd[0] == "python3":
        cmd[0] = sys.executable
    os.execvp("ip", ["ip", "netns", "exec", f"{lab}-{node}", *cmd])
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

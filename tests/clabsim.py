#!/usr/bin/env python3
"""A stand-in for the ``containerlab`` CLI, for tests on machines with a Docker engine but no containerlab.

It implements only what hpnlab calls (deploy / destroy --cleanup / inspect --format json, each with -t)
and only the linux-kind topologies hpnlab generates, but it fails where containerlab fails. Each rule
names the file of srl-labs/containerlab it mirrors, at v0.79.0 (commit 39ff2b7, the commit of
../shared/schemas/clab.schema.json):

- the topology is parsed strictly: an unknown field or a repeated key is an error (core/file.go:
  yaml.UnmarshalStrict into core/config.go Config, types/topology.go Topology, types/node_definition.go
  NodeDefinition, links/link.go, links/link_veth.go, links/link_vxlan.go, links/endpoint_raw.go);
- every bind's source must exist, relative to the topology file's folder, before anything is created
  (core/config.go resolveBindPaths: "failed to verify bind path");
- one container per node, named clab-<lab>-<node> (core/config.go nodeLongName with the default prefix),
  its network namespace linked as /run/netns/clab-<lab>-<node>; linux nodes run privileged, as
  containerlab runs every kind whose registry entry does not say otherwise (core/config.go
  privilegedByDefault);
- links are made after the containers started (core/clab.go: a node's DeployEndpoints after its
  deployNode), each veth in the root namespace under random names, moved into the nodes, then inside
  each node renamed, given its MAC and set up, in that order (links/link_veth.go, links/link.go
  SetNameMACAndUpInterface); its MTU is the link's ``mtu:`` or 9500 (links/link_veth.go,
  constants/containerlab.go DefaultLinkMTU).

Differences, because of this machine: where the Docker engine refuses privileged containers (this
project's machines), nodes run with NET_ADMIN/NET_RAW/SYS_ADMIN instead and deploy says so on stderr;
no management network (hpnlab never uses it); TX checksum offload is left as is (containerlab turns it
off with ethtool; veths here need neither). CLABSIM_STEP_DELAY (seconds) waits between a link end's
rename, MAC and up, to widen the window a node's boot must cope with.

It is never installed for users; tests put it on PATH as ``containerlab`` so the real
``hpnlab up --runtime clab`` code runs end to end on real containers.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import yaml

NETNS = Path("/run/netns")
CAPS = ("NET_ADMIN", "NET_RAW", "SYS_ADMIN")
DEFAULT_LINK_MTU = 9500  # constants/containerlab.go DefaultLinkMTU

# The fields containerlab's types know (yaml tags at v0.79.0); anything else is an unmarshal error.
CONFIG_FIELDS = {"name", "prefix", "mgmt", "settings", "topology", "debug"}  # core/config.go Config
TOPOLOGY_FIELDS = {"defaults", "kinds", "nodes", "groups", "links"}  # types/topology.go Topology
NODE_FIELDS = {  # types/node_definition.go NodeDefinition
    "username", "password", "identity-file", "kind", "group", "type", "startup-config", "startup-delay",
    "enforce-startup-config", "suppress-startup-config", "auto-remove", "restart-policy", "config", "image",
    "image-pull-policy", "license", "position", "hostname", "entrypoint", "cmd", "exec", "binds", "volumes",
    "devices", "cap-add", "privileged", "cgroupns-mode", "cgroup-parent", "pid-mode", "tmpfs", "security-opts",
    "shm-size", "ports", "mgmt-ipv4", "mgmt-ipv6", "env", "env-files", "user", "labels", "network-mode",
    "runtime", "cpu", "cpu-set", "memory", "sysctls", "extras", "stages", "dns", "certificate", "healthcheck",
    "credentials", "aliases", "components", "link-apply-mode"}
LINK_FIELDS = {"type", "labels", "vars", "mtu", "ipv4", "ipv6",  # links/link.go
               "endpoints",  # links/link_veth.go
               "endpoint", "remote", "vni", "dst-port", "src-port", "udp-port", "parent-interface"}  # link_vxlan.go
ENDPOINT_FIELDS = {"node", "interface", "mac", "ipv4", "ipv6", "vars"}  # links/endpoint_raw.go


def fail(msg: str) -> None:
    sys.stderr.write(f"Error: {msg}\n")
    sys.exit(1)


def sh(*argv: str, input: str | None = None, check: bool = True) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, input=input)
    if r.returncode != 0 and check:
        fail(f"{' '.join(argv[:3])}: {r.stderr.strip()}")
    return r.stdout


class _StrictLoader(yaml.SafeLoader):
    """yaml.v2's UnmarshalStrict: a key given twice in one mapping is an error."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f'key "{key}" already set in map',
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def _unknown(d, allowed: set[str], where: str) -> list[str]:
    if not isinstance(d, dict):
        return []
    return [f"field {k} not found in type {where}" for k in d if k not in allowed]


def load(topo: Path) -> dict:
    try:
        t = yaml.load(topo.read_text(), Loader=_StrictLoader)
    except yaml.YAMLError as e:
        fail(f"yaml: {e}\nConsult with release notes to see if any fields were changed/removed")
    tp = t.get("topology") or {}
    errs = _unknown(t, CONFIG_FIELDS, "clab.Config") + _unknown(tp, TOPOLOGY_FIELDS, "types.Topology")
    for scope in ("nodes", "groups", "kinds"):
        for name, n in (tp.get(scope) or {}).items():
            errs += _unknown(n, NODE_FIELDS, "types.NodeDefinition")
    errs += _unknown(tp.get("defaults"), NODE_FIELDS, "types.NodeDefinition")
    for lk in tp.get("links") or []:
        errs += _unknown(lk, LINK_FIELDS, "links.LinkDefinition")
        for e in lk.get("endpoints") or []:
            errs += _unknown(e, ENDPOINT_FIELDS, "links.EndpointRaw")
    if errs:
        fail("yaml: unmarshal errors:\n  " + "\n  ".join(errs)
             + "\nConsult with release notes to see if any fields were changed/removed")
    return t


def node_settings(t: dict, name: str) -> dict:
    """A node's settings: node over group over kind over defaults (types/topology.go getField...)."""
    tp = t["topology"]
    n = tp["nodes"][name] or {}
    g = (tp.get("groups") or {}).get(n.get("group"), {}) or {}
    d = tp.get("defaults") or {}
    k = (tp.get("kinds") or {}).get(n.get("kind") or g.get("kind") or d.get("kind"), {}) or {}
    merged = {**d, **k, **g, **n}
    for key in ("sysctls", "labels"):
        merged[key] = {**d.get(key, {}), **k.get(key, {}), **g.get(key, {}), **n.get(key, {})}
    merged["binds"] = n.get("binds", g.get("binds", k.get("binds", d.get("binds", []))))
    return merged


def check_binds(t: dict, topo: Path) -> None:
    """core/config.go resolveBindPaths: a bind source that does not exist fails the deploy up front."""
    for name in t["topology"]["nodes"]:
        for b in node_settings(t, name)["binds"]:
            src = Path(b.split(":", 1)[0]).expanduser()
            path = src if src.is_absolute() else (topo.parent / src)
            if not path.exists():
                fail(f"failed to verify bind path: stat {path}: no such file or directory")


def endpoints(lk: dict) -> list[dict]:
    out = []
    for e in lk["endpoints"]:
        if isinstance(e, str):  # the brief form "node:iface"
            node, iface = e.split(":", 1)
            e = {"node": node, "interface": iface}
        out.append(e)
    return out


def _run_node(argv: list[str], cname: str, image: str, privileged: bool) -> bool:
    """docker run, privileged or with capabilities; False if the engine refused it."""
    flags = ["--privileged"] if privileged else [x for c in CAPS for x in ("--cap-add", c)]
    r = subprocess.run([*argv, *flags, image], capture_output=True, text=True)
    if r.returncode == 0:
        return True
    if privileged:
        subprocess.run(["docker", "rm", "-f", cname], capture_output=True)
        sys.stderr.write(f"clabsim: this Docker engine refuses privileged containers "
                         f"({r.stderr.strip().splitlines()[-1:]}); nodes run with {', '.join(CAPS)} instead\n")
        return False
    fail(f"docker run {cname}: {r.stderr.strip()}")
    return False


def deploy(topo: Path) -> None:
    t = load(topo)
    check_binds(t, topo)  # before anything is created, as containerlab does
    lab = t["name"]
    NETNS.mkdir(parents=True, exist_ok=True)
    privileged = True
    for name in t["topology"]["nodes"]:
        s = node_settings(t, name)
        if s.get("kind", "linux") != "linux":
            fail(f"clabsim: node {name}: only linux nodes are supported here")
        cname = f"clab-{lab}-{name}"
        argv = ["docker", "run", "-d", "--name", cname, "--hostname", name, "--network", "none",
                "--restart", s.get("restart-policy", "no"), "--label", f"containerlab={lab}",
                "--label", f"clab-node-name={name}", "--label", f"clab-topo-file={topo}"]
        for k, v in s["labels"].items():
            argv += ["--label", f"{k}={v}"]
        for k, v in s["sysctls"].items():
            argv += ["--sysctl", f"{k}={v}"]
        for b in s["binds"]:
            src, rest = b.split(":", 1)
            argv += ["-v", f"{(topo.parent / src).resolve()}:{rest}"]
        if s.get("privileged", True) is not False:
            if privileged and not _run_node(argv, cname, s["image"], True):
                privileged = False
            if not privileged:
                _run_node(argv, cname, s["image"], False)
        else:
            _run_node(argv, cname, s["image"], False)
        pid = sh("docker", "inspect", "-f", "{{.State.Pid}}", cname).strip()
        link = NETNS / cname
        link.unlink(missing_ok=True)
        link.symlink_to(f"/proc/{pid}/ns/net")
    delay = float(os.environ.get("CLABSIM_STEP_DELAY", "0"))
    for lk in t["topology"]["links"]:
        if lk.get("type", "veth") != "veth":
            fail(f"clabsim: link type {lk.get('type')} is not supported here")
        a, b = endpoints(lk)
        mtu = int(lk.get("mtu") or DEFAULT_LINK_MTU)
        ra, rb = f"clab-{secrets.token_hex(4)}", f"clab-{secrets.token_hex(4)}"
        na, nb = f"clab-{lab}-{a['node']}", f"clab-{lab}-{b['node']}"
        sh("ip", "-batch", "-", input=f"link add {ra} mtu {mtu} type veth peer name {rb} mtu {mtu}\n"
                                     f"link set {ra} netns {na}\nlink set {rb} netns {nb}\n")
        for ns, rnd, e in ((na, ra, a), (nb, rb, b)):
            sh("ip", "-n", ns, "link", "set", rnd, "name", e["interface"])
            time.sleep(delay)
            if e.get("mac"):
                sh("ip", "-n", ns, "link", "set", e["interface"], "address", e["mac"])
                time.sleep(delay)
            sh("ip", "-n", ns, "link", "set", e["interface"], "up")


def containers(lab: str) -> list[dict]:
    out = sh("docker", "ps", "-a", "--filter", f"label=containerlab={lab}", "--format", "{{json .}}")
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def destroy(topo: Path) -> None:
    lab = load(topo)["name"]
    ids = [c["ID"] for c in containers(lab)]
    if ids:
        sh("docker", "rm", "-f", *ids)
    for link in NETNS.glob(f"clab-{lab}-*"):
        link.unlink(missing_ok=True)


def inspect(topo: Path) -> None:
    lab = load(topo)["name"]
    rows = [{"lab_name": lab, "name": c["Names"], "container_id": c["ID"], "image": c["Image"], "kind": "linux",
             "state": c["State"], "status": c["Status"]} for c in containers(lab)]
    print(json.dumps({lab: rows}, indent=2))


def main(argv: list[str]) -> int:
    if not argv or "-t" not in argv or argv[0] not in ("deploy", "destroy", "inspect"):
        sys.stderr.write("clabsim: usage: containerlab deploy|destroy|inspect -t TOPO\n")
        return 2
    topo = Path(argv[argv.index("-t") + 1]).resolve()
    {"deploy": deploy, "destroy": destroy, "inspect": inspect}[argv[0]](topo)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

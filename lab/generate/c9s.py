"""clabernetes export: a lab as Kubernetes objects, for labs that outgrow one machine (a full HPN Pod is
2,000+ nodes). Pure: rendered files in, {relative path: YAML text} out.

clabernetes runs every containerlab node in a launcher pod of its own and turns each link into a VXLAN
tunnel between pods. What it is given here:

- a ``Topology`` (``apiVersion c9s.run/v1alpha1``; ``clabernetes.containerlab.dev/v1alpha1`` before 0.7)
  whose ``spec.definition.containerlab`` is the lab's containerlab topology, with links in the plain
  ``endpoints: ["a:x", "b:y"]`` form the compiler takes (the MACs are set by each node itself, from its
  node.json), ``filesFromConfigMap`` for every bound file, resource requests per role, and a
  pod anti-affinity that keeps the two ToRs of a dual-ToR set on different Kubernetes nodes;
- one ``ConfigMap`` per node with its bound files (node.json, frr.conf, daemons);
- when the Topology would pass Kubernetes' object size limit (etcd stores ~1.5 MB per object; a full
  segment or Pod does), clabernetes' ``Node`` and ``Link`` objects instead (its primary API since 0.7),
  one file per kind.

``compiler_problems`` checks what the clabernetes compiler rejects and no schema shows: bridge, ovs-bridge
and host pseudo-nodes; link types other than plain veth; endpoints that are not ``node:iface``; and node
plus interface names longer than 14 characters together (the launcher names the host side of every
cross-pod link ``<node>-<iface>``, and Linux caps interface names at 15).
"""

from __future__ import annotations

import json
import re

import yaml

from hpnlab.errors import SpecError
from hpnlab.node.plan import MTU
from hpnlab.model.topology import Topology

APIS = {"c9s.run": "c9s.run/v1alpha1", "clabernetes.containerlab.dev": "clabernetes.containerlab.dev/v1alpha1"}
MAX_OBJECT_BYTES = 1_500_000  # etcd's request limit, as Kubernetes documents it: ~1.5 MiB
NAME_LIMIT = 14  # len(node) + len(interface): the launcher's <node>-<iface> must fit IFNAMSIZ - 1
FORBIDDEN_KINDS = ("bridge", "ovs-bridge", "host")
FORBIDDEN_LINK_TYPES = ("vxlan", "vxlan-stitch", "macvlan", "dummy", "mgmt-net", "host")
BOUND = ("node.json", "frr.conf", "daemons")
# Requests per role: measured PSS here (FRR ~30 MB per router, agents 16-34 MB) plus a launcher pod's own
# docker and containerlab; CPU is what an idle node needs, so that a scheduler packs them sensibly.
RESOURCES = {"host": {"requests": {"cpu": "100m", "memory": "192Mi"}},
             "tor": {"requests": {"cpu": "250m", "memory": "320Mi"}},
             "agg": {"requests": {"cpu": "250m", "memory": "256Mi"}},
             "core": {"requests": {"cpu": "250m", "memory": "256Mi"}}}
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
REGISTRY = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9._-]+)*/?")


# libyaml where PyYAML has it: the 15K Pod's objects are ~50 MB of YAML (pure Python: minutes)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _dump(obj) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=120)


def _dump_all(objs) -> str:
    return yaml.dump_all(objs, Dumper=_Dumper, sort_keys=False, width=120)


def definition(clab_text: str, topo: Topology | None = None, registry: str | None = None) -> dict:
    """The rendered containerlab topology as clabernetes compiles it: plain two-endpoint links with the
    lab's MTU, and every node self-contained. clabernetes' containerlab model has only defaults, kinds,
    nodes and links (util/containerlab/types.go at clabernetes 354b414): ``groups:`` and ``group:`` would
    vanish and leave every node with no kind and no image. The ``run`` bind goes too: in a launcher pod
    only the files of ``filesFromConfigMap`` exist, and containerlab refuses a bind without a source.
    ``registry`` prefixes every image (the cluster pulls them from there).
    With ``topo``, only the part before ``links:`` is parsed and the links come from the topology
    itself (parsing 45,000 rendered links of the 15K Pod took PyYAML ~13 s)."""
    head, sep, _links = clab_text.partition("\n  links:\n")
    if topo is None or not sep:
        d = yaml.load(clab_text, Loader=_Loader)
        ends = [[f"{e['node']}:{e['interface']}" for e in lk["endpoints"]] for lk in d["topology"]["links"]]
    else:
        d = yaml.load(head + "\n", Loader=_Loader)
        ends = [[f"{lk.a.node}:{lk.a.iface}", f"{lk.b.node}:{lk.b.iface}"] for lk in topo.links]
    d["topology"]["links"] = [{"endpoints": e, "mtu": MTU} for e in ends]
    groups = d["topology"].pop("groups", None) or {}
    nodes = {}
    for name, n in d["topology"]["nodes"].items():
        n = dict(n or {})
        g = groups.get(n.pop("group", None), {}) or {}
        merged = {**g, **n}
        for key in ("sysctls", "labels"):
            if key in g or key in n:
                merged[key] = {**g.get(key, {}), **n.get(key, {})}
        merged["binds"] = [b for b in merged.get("binds", []) if not b.endswith(":/run/hpnlab")]
        if registry:
            merged["image"] = f"{registry.rstrip('/')}/{merged['image']}"
        nodes[name] = merged
    d["topology"]["nodes"] = nodes
    return d


def self_contained_problems(defn: dict) -> list[str]:
    """What clabernetes' parser would lose: groups (dropped), and nodes with no kind or image of their own."""
    topo = defn.get("topology") or {}
    out = [f"'{k}' at the top of the topology: clabernetes' containerlab model drops it" for k in topo
           if k not in ("defaults", "kinds", "nodes", "links")]
    for name, n in (topo.get("nodes") or {}).items():
        n = n or {}
        if "group" in n:
            out.append(f"node '{name}': 'group' is dropped by clabernetes")
        for key in ("kind", "image"):
            if not n.get(key) and not (topo.get("defaults") or {}).get(key):
                out.append(f"node '{name}': no {key} of its own")
    return out


def _json_docs(objs) -> str:
    """Large files: one JSON document per object (YAML 1.2 is a superset of JSON; kubectl reads it),
    written in a fraction of the time PyYAML's representer takes for ~50,000 objects."""
    return "".join("---\n" + json.dumps(o, separators=(",", ":")) + "\n" for o in objs)


def compiler_problems(defn: dict) -> list[str]:
    """What clabernetes' compiler would reject in a containerlab definition (empty when it compiles)."""
    out = []
    topo = defn.get("topology") or {}
    nodes = topo.get("nodes") or {}
    groups = topo.get("groups") or {}
    for name, n in nodes.items():
        kind = (n or {}).get("kind") or (groups.get((n or {}).get("group"), {}) or {}).get("kind")
        if kind in FORBIDDEN_KINDS:
            out.append(f"node '{name}': kind '{kind}' is a pseudo-node clabernetes cannot run in a pod")
    for i, lk in enumerate(topo.get("links") or []):
        if lk.get("type") not in (None, "veth"):
            out.append(f"links[{i}]: type '{lk.get('type')}': clabernetes makes every link a tunnel itself; "
                       f"give plain node:iface endpoints")
            continue
        eps = lk.get("endpoints") or []
        if len(eps) != 2:
            out.append(f"links[{i}]: {len(eps)} endpoints; a link has exactly two")
            continue
        for ep in eps:
            if not isinstance(ep, str) or ep.count(":") != 1:
                out.append(f"links[{i}]: endpoint {ep!r} is not 'node:iface'")
                continue
            node, ifc = ep.split(":")
            if node not in nodes:
                out.append(f"links[{i}]: endpoint '{ep}' names no node of the topology "
                           f"(host:, mgmt-net: and macvlan: endpoints do not exist in clabernetes)")
            elif len(node) + len(ifc) > NAME_LIMIT:
                out.append(f"links[{i}]: '{node}' + '{ifc}' is {len(node) + len(ifc)} characters; the launcher's "
                           f"'{node}-{ifc}' must fit 15 (at most {NAME_LIMIT} together)")
    return out


def configmap_name(lab: str, node: str) -> str:
    return f"{lab}-{node}"


def configmaps(files: dict[str, str], topo: Topology, namespace: str | None) -> list[dict]:
    out = []
    for n in topo.nodes:
        data = {f: files[f"{n.name}/{f}"] for f in BOUND if f"{n.name}/{f}" in files}
        meta = {"name": configmap_name(topo.name, n.name), "labels": {"hpnlab/lab": topo.name, "hpnlab/node": n.name}}
        if namespace:
            meta["namespace"] = namespace
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    return out


def files_from_configmap(files: dict[str, str], topo: Topology) -> dict[str, list[dict]]:
    """node -> the launcher mounts: each bound file where the topology's binds expect it (<node>/<file>,
    relative to the containerlab topology, as `hpnlab generate` lays them out)."""
    return {n.name: [{"configMapName": configmap_name(topo.name, n.name), "configMapPath": f,
                      "filePath": f"{n.name}/{f}", "mode": "read"}
                     for f in BOUND if f"{n.name}/{f}" in files] for n in topo.nodes}


# The label clabernetes puts on each launcher pod with its node's name: c9s.run/topologyNode from 0.7
# (constants/labels.go and controllers/node/deployment.go at 354b414), clabernetes/topologyNode before
# (srl-labs/clabernetes 1cc0cbe constants/labels.go).
NODE_LABEL = {"c9s.run": "c9s.run/topologyNode", "clabernetes.containerlab.dev": "clabernetes/topologyNode"}


def anti_affinity(topo: Topology, api: str = "c9s.run") -> dict:
    """The two ToRs of each set on different Kubernetes nodes. clabernetes gives every launcher pod of a
    Topology the same scheduling block, so these are preferences (weight 100) carried by every pod: they
    keep each pair apart, and bias other pods only mildly away from ToR pods."""
    terms = [{"weight": 100, "podAffinityTerm": {
        "labelSelector": {"matchExpressions": [{"key": NODE_LABEL[api], "operator": "In",
                                                "values": list(st.tors)}]},
        "topologyKey": "kubernetes.io/hostname"}} for st in topo.sets if len(st.tors) == 2]
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}} if terms else {}


def export(files: dict[str, str], topo: Topology, api: str = "c9s.run", namespace: str | None = None,
           force_nodes: bool = False, registry: str | None = None) -> dict[str, str]:
    """{relative path: YAML} for clabernetes: a Topology (small labs) or Node + Link objects (large ones),
    and the ConfigMaps either way. Refuses, in one line, a lab the clabernetes compiler would reject."""
    if api not in APIS:
        raise SpecError(f"--c9s-api '{api}': give one of {', '.join(APIS)} (clabernetes.containerlab.dev "
                        f"for releases before 0.7)")
    if namespace is not None and not DNS_LABEL.fullmatch(namespace):
        raise SpecError(f"--namespace '{namespace[:40]}': a Kubernetes namespace is lowercase letters, digits and '-'")
    if registry is not None and not REGISTRY.fullmatch(registry):
        raise SpecError(f"--registry '{registry[:60]}': give a registry host and path, e.g. registry.example:5000/labs")
    lab = topo.name
    defn = definition(files[f"{lab}.clab.yml"], topo, registry)
    problems = compiler_problems(defn) + self_contained_problems(defn)
    if problems:
        raise SpecError(f"clabernetes would reject this lab: {problems[0]}"
                        + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    meta = {"name": lab, "labels": {"hpnlab/lab": lab}}
    if namespace:
        meta["namespace"] = namespace
    role = {n.name: n.role for n in topo.nodes}
    resources = {"default": RESOURCES["host"], **{n: RESOURCES[r] for n, r in role.items() if r != "host"}}
    scheduling = {"affinity": anti_affinity(topo, api)} if anti_affinity(topo, api) else {}
    deployment = {"resources": resources, "filesFromConfigMap": files_from_configmap(files, topo)}
    if scheduling:
        deployment["scheduling"] = scheduling
    topology_obj = {"apiVersion": APIS[api], "kind": "Topology", "metadata": meta,
                    "spec": {"definition": {"containerlab": _dump(defn)}, "naming": "prefixed",
                             "connectivity": "vxlan", "deployment": deployment}}
    # the definition alone past the limit: no need to build the Topology's text to know
    text = "" if force_nodes or len(files[f"{lab}.clab.yml"]) > MAX_OBJECT_BYTES else _dump(topology_obj)
    if text and len(text.encode()) <= MAX_OBJECT_BYTES:
        return {f"c9s/{lab}.configmaps.yaml": _dump_all(configmaps(files, topo, namespace)),
                f"c9s/{lab}.topology.yaml": text}
    out = {f"c9s/{lab}.configmaps.yaml": _json_docs(configmaps(files, topo, namespace))}
    if api != "c9s.run":
        why = "Node + Link objects were asked for" if force_nodes else \
            f"lab '{lab}' is too large for one Topology object (Kubernetes stores ~{MAX_OBJECT_BYTES} bytes)"
        raise SpecError(f"{why}, and releases before 0.7 have none: use --c9s-api c9s.run")
    nodes, links = node_and_link_objects(defn, files, topo, namespace)
    out[f"c9s/{lab}.nodes.yaml"] = _json_docs(nodes)
    out[f"c9s/{lab}.links.yaml"] = _json_docs(links)
    return out


def node_and_link_objects(defn: dict, files: dict[str, str], topo: Topology,
                          namespace: str | None) -> tuple[list[dict], list[dict]]:
    """clabernetes' Node (one containerlab node each, named after it) and Link (two endpoints) objects."""
    fcm = files_from_configmap(files, topo)

    def meta(name: str) -> dict:
        m = {"name": name, "labels": {"hpnlab/lab": topo.name}}
        if namespace:
            m["namespace"] = namespace
        return m

    nodes = []
    for name, n in defn["topology"]["nodes"].items():  # self-contained (definition)
        spec = {"kind": n.get("kind", "linux"), "image": n.get("image"), "binds": n.get("binds", []),
                "sysctls": {k: str(v) for k, v in n.get("sysctls", {}).items()}, "filesFromConfigMap": fcm[name]}
        nodes.append({"apiVersion": APIS["c9s.run"], "kind": "Node", "metadata": meta(name), "spec": spec})
    links = []
    for lk in defn["topology"]["links"]:
        (na, ia), (nb, ib) = (e.split(":") for e in lk["endpoints"])
        name = f"{topo.name}-{na}-{ia}-{nb}-{ib}".lower()
        links.append({"apiVersion": APIS["c9s.run"], "kind": "Link", "metadata": meta(name),
                      "spec": {"endpointA": {"nodeName": na, "interfaceName": ia},
                               "endpointB": {"nodeName": nb, "interfaceName": ib}, "connectivity": "vxlan",
                               "mtu": lk.get("mtu", MTU)}})
    return nodes, links

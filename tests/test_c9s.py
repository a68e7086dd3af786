"""clabernetes export: every object passes its CRD's openAPIV3Schema (as the API server applies it:
defaults filled in first, unknown fields refused rather than silently pruned), the embedded containerlab
definitions pass containerlab's schema, and each compiler rule that no schema shows rejects a
deliberately broken export. The CRDs and schemas come from ../shared/schemas (skipped, with the reason
printed, where absent)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import jsonschema
import pytest
import yaml

from hpnlab.generate import c9s, render
from hpnlab.model import topology
from hpnlab.cli import main
from hpnlab.errors import SpecError
from hpnlab.model.spec import load_spec, parse_spec
from tests.conftest import EXAMPLES, ROOT, SHARED, _skip

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SEGMENT_FULL = {"name": "segfull", "segments": 1, "hosts_per_segment": 128, "rails": 8, "aggs_per_plane": 60}


def _crd(kind: str) -> dict:
    path = SHARED / "schemas" / f"c9s.run_{kind}.crd.yaml"
    if not path.exists():
        _skip(f"clabernetes CRD not found at {path} (../shared beside the checkout)")
    d = yaml.safe_load(path.read_text())
    return d["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def strict(schema: dict) -> dict:
    """The API server prunes fields a structural schema does not know; for a test that is a typo to
    catch, so objects with properties get additionalProperties: false (unless they preserve unknowns)."""
    s = copy.deepcopy(schema)

    def walk(x):
        if isinstance(x, dict):
            if x.get("type") == "object" and "properties" in x and "additionalProperties" not in x \
                    and not x.get("x-kubernetes-preserve-unknown-fields"):
                x["additionalProperties"] = False
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(s)
    return s


def with_defaults(obj, schema: dict):
    """Fill in ``default:`` values the way the API server does before it validates."""
    if isinstance(obj, dict) and schema.get("type") == "object":
        for k, sub in (schema.get("properties") or {}).items():
            if k not in obj and "default" in sub:
                obj[k] = copy.deepcopy(sub["default"])
            if k in obj:
                with_defaults(obj[k], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for k in obj:
                if k not in (schema.get("properties") or {}):
                    with_defaults(obj[k], extra)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for v in obj:
            with_defaults(v, schema["items"])
    return obj


@pytest.fixture(scope="module")
def validators():
    return {kind: (jsonschema.Draft7Validator(strict(_crd(plural))), _crd(plural))
            for kind, plural in (("Topology", "topologies"), ("Node", "nodes"), ("Link", "links"))}


@pytest.fixture(scope="module")
def clab_validator(clab_schema):
    return jsonschema.Draft7Validator(clab_schema)


def _docs(text: str) -> list[dict]:
    """A file's objects: pretty YAML documents, or one JSON document each (large labs)."""
    if text.startswith("---\n{"):
        return [json.loads(d) for d in text.split("---\n") if d.strip()]
    return list(yaml.load_all(text, Loader=Loader))


def _objects(out: dict[str, str]) -> list[dict]:
    return [o for path, text in out.items() if path.startswith("c9s/") for o in _docs(text)]


def _configmaps(text: str) -> int:
    """ConfigMaps in a large file (one JSON document each), without parsing tens of MB."""
    return text.count('"kind":"ConfigMap"')


def check(out: dict[str, str], validators, clab_validator, sample: int | None = None) -> dict[str, int]:
    kinds: dict[str, int] = {}
    seen: dict[str, int] = {}
    for o in _objects(out):
        kinds[o["kind"]] = kinds.get(o["kind"], 0) + 1
        if o["kind"] == "ConfigMap":
            assert set(o["data"]) <= set(c9s.BOUND) and o["data"]
            continue
        n = seen[o["kind"]] = seen.get(o["kind"], 0) + 1
        if sample and n > sample and n % sample:
            continue  # a large export: every object of each kind is built alike; validate a spread of them
        v, raw = validators[o["kind"]]
        errors = sorted(v.iter_errors(with_defaults(copy.deepcopy(o), raw)), key=str)
        assert not errors, f"{o['kind']} {o['metadata']['name']}: {errors[0].message} at {list(errors[0].path)}"
        if o["kind"] == "Topology":
            defn = yaml.safe_load(o["spec"]["definition"]["containerlab"])
            errs = list(clab_validator.iter_errors(defn))
            assert not errs, errs[0].message
            assert c9s.compiler_problems(defn) == []
    return kinds


def _export(spec, **kw):
    topo = topology.build(spec)
    files = render.render(topo)
    return c9s.export(files, topo, **kw), files, topo


@pytest.mark.parametrize("path", sorted(p for p in EXAMPLES.glob("*.yml") if p.stem != "hpn-pod-15k"),
                         ids=lambda p: p.stem)
def test_every_example_exports_to_a_valid_topology(path, validators, clab_validator):
    out, files, topo = _export(load_spec(path))
    kinds = check(out, validators, clab_validator)
    assert kinds == {"Topology": 1, "ConfigMap": len(topo.nodes)}
    t = next(o for o in _objects(out) if o["kind"] == "Topology")
    dep = t["spec"]["deployment"]
    assert set(dep["filesFromConfigMap"]) == {n.name for n in topo.nodes}
    # every bind of the definition is served by a ConfigMap file at the path the bind names (run dirs
    # are created by docker)
    defn = yaml.safe_load(t["spec"]["definition"]["containerlab"])
    for name, n in defn["topology"]["nodes"].items():
        served = {f["filePath"] for f in dep["filesFromConfigMap"][name]}
        assert {b.split(":")[0] for b in n["binds"] if not b.split(":")[0].endswith("/run")} == served
    pairs = [st.tors for st in topo.sets if len(st.tors) == 2]
    terms = (dep.get("scheduling") or {}).get("affinity", {}).get("podAntiAffinity", {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution", [])
    assert [t_["podAffinityTerm"]["labelSelector"]["matchExpressions"][0]["values"] for t_ in terms] == pairs


def test_pre_07_api_group(validators, clab_validator):
    out, _f, _t = _export(load_spec(EXAMPLES / "default.yml"), api="clabernetes.containerlab.dev")
    t = next(o for o in _objects(out) if o["kind"] == "Topology")
    assert t["apiVersion"] == "clabernetes.containerlab.dev/v1alpha1"


def test_the_full_segment_fits_one_topology(validators, clab_validator):
    """1 segment x 128 hosts x 8 rails, 60 aggs per plane: 264 nodes, 3008 links -- ~0.35 MB as a Topology."""
    out, files, topo = _export(parse_spec(SEGMENT_FULL))
    assert check(out, validators, clab_validator) == {"Topology": 1, "ConfigMap": len(topo.nodes)}
    assert len(out["c9s/segfull.topology.yaml"].encode()) < c9s.MAX_OBJECT_BYTES


@pytest.mark.parametrize("spec", [SEGMENT_FULL, "hpn-pod-15k"], ids=["segment-full-as-nodes", "pod-15k"])
def test_nodes_and_links_for_the_largest_fabrics(spec, validators, clab_validator):
    """The 15K Pod (2280 nodes, 45120 links) passes the object limit: Node + Link objects, one file each."""
    sp = parse_spec(SEGMENT_FULL) if isinstance(spec, dict) else load_spec(EXAMPLES / f"{spec}.yml")
    out, files, topo = _export(sp, force_nodes=isinstance(spec, dict))
    if not isinstance(spec, dict):
        assert len(files[f"{topo.name}.clab.yml"].encode()) > c9s.MAX_OBJECT_BYTES  # one Topology cannot hold it
    cms = out.pop(f"c9s/{topo.name}.configmaps.yaml")
    assert _configmaps(cms) == len(topo.nodes)
    kinds = check(out, validators, clab_validator, sample=97)
    assert kinds == {"Node": len(topo.nodes), "Link": len(topo.links)}
    links = [o for o in _objects({k: v for k, v in out.items() if k.endswith("links.yaml")})]
    names = {o["metadata"]["name"] for o in links}
    assert len(names) == len(links) and all(len(n) <= 253 for n in names)  # unique, valid object names
    # the compiler's name rule on every link of the paper's largest fabric
    for o in links:
        for e in ("endpointA", "endpointB"):
            assert len(o["spec"][e]["nodeName"]) + len(o["spec"][e]["interfaceName"]) <= c9s.NAME_LIMIT


@pytest.mark.parametrize("name", ["default", "stacked", "load-balance"])
def test_the_fast_definition_is_the_rendered_one(name):
    """Links taken from the topology instead of parsed from the rendered file: the same definition."""
    topo = topology.build(load_spec(EXAMPLES / f"{name}.yml"))
    text = render.render(topo)[f"{topo.name}.clab.yml"]
    assert c9s.definition(text, topo) == c9s.definition(text)


def _defn():
    topo = topology.build(load_spec(EXAMPLES / "default.yml"))
    return c9s.definition(render.render(topo)["hpn.clab.yml"])


@pytest.mark.parametrize("breakage, words", [
    (lambda d: d["topology"]["nodes"].update(br0={"kind": "bridge"}), "pseudo-node"),
    (lambda d: d["topology"]["nodes"].update(h={"kind": "host"}), "pseudo-node"),
    (lambda d: d["topology"]["links"].append({"type": "vxlan", "endpoint": {"node": "s0h0", "interface": "x"}}),
     "type 'vxlan'"),
    (lambda d: d["topology"]["links"].append({"type": "macvlan"}), "type 'macvlan'"),
    (lambda d: d["topology"]["links"].append({"endpoints": ["s0h0:e1", "s0h1:e1", "s1h0:e1"]}), "exactly two"),
    (lambda d: d["topology"]["links"].append({"endpoints": ["s0h0:e1", "host:veth9"]}), "names no node"),
    (lambda d: d["topology"]["links"].append({"endpoints": ["s0h0:e1", "mgmt-net:s0h0-e1"]}), "names no node"),
    (lambda d: d["topology"]["links"].append({"endpoints": ["s0h0:averylongiface", "s0h1:e1"]}), "at most 14"),
    (lambda d: d["topology"]["links"].append({"endpoints": ["s0h0", "s0h1:e1"]}), "is not 'node:iface'"),
])
def test_each_compiler_rule_rejects_a_broken_export(breakage, words):
    d = _defn()
    assert c9s.compiler_problems(d) == []
    breakage(d)
    problems = c9s.compiler_problems(d)
    assert problems and any(words in p for p in problems), problems


def test_a_lab_the_compiler_would_reject_is_one_line_and_nothing_is_written(tmp_path, capsys):
    from hpnlab.cli import main

    spec = tmp_path / "ok.yml"
    spec.write_text("name: ok\n")
    topo = topology.build(parse_spec({"name": "t"}))
    files = render.render(topo)
    topo.links[0].a.iface = "r0p0withaverylongname"  # a name the launcher could not create
    with pytest.raises(SpecError) as e:
        c9s.export(files, topo)
    assert "clabernetes would reject" in str(e.value) and "\n" not in str(e.value)
    assert main(["generate", str(spec), "--target", "c9s", "--namespace", "Bad_NS", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--namespace" in err and "\n" not in err and not (tmp_path / "o").exists()
    assert main(["generate", str(spec), "--c9s-nodes", "--out", str(tmp_path / "o")]) == 2
    assert "--target c9s" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_nodes_and_links_on_request_for_a_small_lab(validators, clab_validator):
    out, _f, topo = _export(load_spec(EXAMPLES / "default.yml"), force_nodes=True)
    assert check(out, validators, clab_validator) == {"Node": 16, "Link": 32, "ConfigMap": 16}
    node = next(o for o in _objects(out) if o["kind"] == "Node" and o["metadata"]["name"] == "s0r0a")
    # The ECMP hash seed is not a container sysctl (runc refuses one the kernel lacks: before Linux 6.11);
    # the node sets it at boot from its node.json, which the Node's ConfigMap carries.
    assert "net.ipv4.fib_multipath_hash_seed" not in node["spec"]["sysctls"]
    assert node["spec"]["sysctls"]["net.ipv4.ip_forward"] == "1"
    assert "net.ipv4.fib_multipath_hash_seed" in json.loads(render.render(topo)["s0r0a/node.json"])["sysctls"]
    with pytest.raises(SpecError, match="c9s.run"):
        _export(load_spec(EXAMPLES / "default.yml"), api="clabernetes.containerlab.dev", force_nodes=True)


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yml") if p.name != "hpn-pod-15k.yml"))
def test_every_node_is_self_contained_as_clabernetes_reads_it(example, tmp_path):
    """clabernetes' containerlab model keeps defaults, kinds, nodes and links only: a node relying on a
    group would have no kind and no image there. No node binds a run/ folder the launcher pod lacks, every
    link carries the lab's MTU, and the stand-in kubectl parses the objects as clabernetes does."""
    from hpnlab.node.plan import MTU

    sp = load_spec(EXAMPLES / example)
    out = tmp_path / "o"
    assert main(["generate", str(EXAMPLES / example), "--target", "c9s", "--out", str(out)]) == 0
    nodes, links = {}, []
    for o in _objects({f"c9s/{p.name}": p.read_text() for p in (out / "c9s").iterdir()}):
        if o["kind"] == "Topology":
            d = yaml.safe_load(o["spec"]["definition"]["containerlab"])
            assert set(d["topology"]) <= {"defaults", "kinds", "nodes", "links"}, set(d["topology"])
            assert c9s.self_contained_problems(d) == []
            nodes.update(d["topology"]["nodes"])
            links += [lk.get("mtu") for lk in d["topology"]["links"]]
            if sp.access != "single-tor":  # ToR pairs are kept apart by the label clabernetes puts on pods
                keys = [t["podAffinityTerm"]["labelSelector"]["matchExpressions"][0]["key"]
                        for t in o["spec"]["deployment"]["scheduling"]["affinity"]["podAntiAffinity"][
                            "preferredDuringSchedulingIgnoredDuringExecution"]]
                assert set(keys) == {"c9s.run/topologyNode"}
        elif o["kind"] == "Node":
            nodes[o["metadata"]["name"]] = o["spec"]
        elif o["kind"] == "Link":
            links.append(o["spec"]["mtu"])
    assert len(nodes) == len(topology.build(sp).nodes)
    assert all(n.get("kind") == "linux" and n.get("image") for n in nodes.values())
    assert not any(b.endswith(":/run/hpnlab") for n in nodes.values() for b in n.get("binds", []))
    assert links and set(links) == {MTU}
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "kubesim.py"), "apply", "-f", str(out / "c9s")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_stand_in_rejects_a_definition_that_relies_on_groups(tmp_path):
    """What hpnlab wrote before: nodes with only 'group:' lose kind and image in clabernetes."""
    clab = ("name: g\ntopology:\n  groups:\n    router: {kind: linux, image: hpnlab/router:0.1.0}\n"
            "  nodes:\n    r1: {group: router}\n  links: []\n")
    obj = {"apiVersion": "c9s.run/v1alpha1", "kind": "Topology", "metadata": {"name": "g"},
           "spec": {"definition": {"containerlab": clab}}}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(obj))
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "kubesim.py"), "apply", "-f", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and 'kind "" is not supported' in r.stderr
    assert c9s.self_contained_problems(yaml.safe_load(clab)) != []


def test_registry_prefixes_every_image_and_bad_names_are_one_line(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["generate", "--target", "c9s", "--registry", "reg.example:5000/labs", "--out", str(out)]) == 0
    text = (out / "c9s" / "hpn.topology.yaml").read_text()
    assert "reg.example:5000/labs/hpnlab/router:" in text and "reg.example:5000/labs/hpnlab/host:" in text
    assert main(["generate", "--target", "c9s", "--registry", "Bad Registry!", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "--registry" in err and err.count("\n") == 1 and not (tmp_path / "p").exists()
    assert main(["generate", "--registry", "reg.example", "--out", str(tmp_path / "q")]) == 2


def test_the_c9s_runtime_writes_its_objects_beside_the_lab_for_the_chosen_api(tmp_path, monkeypatch):
    """orchestrate asks every runtime for extra files; the c9s runtime's are the clabernetes objects."""
    from hpnlab.runtime import netns
    from hpnlab.runtime.base import State
    from hpnlab.runtime.c9s import C9sRuntime

    monkeypatch.setattr("hpnlab.runtime.base.STATE_ROOT", tmp_path)
    sp = load_spec(EXAMPLES / "default.yml")
    topo = topology.build(sp)
    files = render.render(topo)
    assert netns.NetnsRuntime("hpn", State("hpn")).extra_files(files, topo) == {}
    rt = C9sRuntime("hpn", State("hpn"))
    monkeypatch.setenv("HPNLAB_C9S_REGISTRY", "reg.example/labs")
    out = rt.extra_files(files, topo)
    assert set(out) == {"c9s/hpn.configmaps.yaml", "c9s/hpn.topology.yaml"}
    assert rt.state.data.k8s_api == "c9s.run" and "reg.example/labs/hpnlab/router:" in out["c9s/hpn.topology.yaml"]
    monkeypatch.setenv("HPNLAB_C9S_API", "clabernetes.containerlab.dev")
    assert "clabernetes.containerlab.dev/v1alpha1" in rt.extra_files(files, topo)["c9s/hpn.topology.yaml"]
    assert rt.exec_target("s0h0") == "hpn-s0h0/s0h0"

"""The containerlab runtime up to the binary call: inspect parsing, argv, images, the workflow, and every
error path of the wrapper, with stand-in ``containerlab``/``docker`` executables on PATH that record how
they were called (containerlab cannot be installed on these machines)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hpnlab.errors import RuntimeFailure
from hpnlab.generate.render import IMAGES, render
from hpnlab.runtime import clab
from hpnlab.model.spec import load_spec
from hpnlab.model.topology import build
from tests.conftest import ROOT

ROW = {"lab_name": "hpn", "name": "clab-hpn-s0r0a", "container_id": "82e9aa3c7e6b", "image": IMAGES["router"],
       "kind": "linux", "state": "running", "ipv4_address": "172.20.20.3/24"}


# --- inspect JSON, every shape ----------------------------------------------------------------------------
@pytest.mark.parametrize("doc", [
    {"containers": [ROW]},                        # containerlab up to 0.5x
    {"hpn": [ROW]},                               # later releases: keyed by lab name
    [ROW],                                        # the earliest releases: a bare list
], ids=["containers", "lab-keyed", "bare-list"])
def test_inspect_shapes_give_the_same_nodes(doc):
    nodes = clab.parse_inspect(json.dumps(doc), "hpn")
    assert nodes == {"s0r0a": {"container": "clab-hpn-s0r0a", "state": "running", "image": IMAGES["router"],
                               "id": "82e9aa3c7e6b"}}


def test_inspect_ignores_other_labs_and_empty_output():
    other = {**ROW, "lab_name": "hpn2", "name": "clab-hpn2-s0r0a"}
    assert set(clab.parse_inspect(json.dumps({"hpn": [ROW], "hpn2": [other]}), "hpn")) == {"s0r0a"}
    assert clab.parse_inspect(json.dumps({"containers": [other]}), "hpn") == {}
    assert clab.parse_inspect("", "hpn") == {}
    assert clab.parse_inspect('{"containers": null}', "hpn") == {}


@pytest.mark.parametrize("text,msg", [
    ("INFO[0000] no containers found\n{", "no valid JSON"),
    ('{"containers": 3}', "not a list"),
    ('{"containers": [{"state": "running"}]}', "no 'name'"),
    ('{"version": "0.60"}', "neither"),
    ('"running"', "neither"),
])
def test_malformed_inspect_is_a_clear_error(text, msg):
    with pytest.raises(RuntimeFailure, match=msg):
        clab.parse_inspect(text, "hpn")


# --- argv: what the runtime hands to the binaries ----------------------------------------------------------
def test_runtime_argv_goes_through_container_netns_and_docker_exec(tmp_path, monkeypatch):
    monkeypatch.setattr("hpnlab.runtime.base.STATE_ROOT", tmp_path)
    rt = clab.ClabRuntime("hpn")
    assert rt.netns("s0h0") == "clab-hpn-s0h0"
    assert rt.exec_argv("s0h0", ["ping", "-c1", "10.0.2.2"]) == ["ip", "netns", "exec", "clab-hpn-s0h0", "ping",
                                                                "-c1", "10.0.2.2"]
    assert rt.vtysh_argv("s0r0a", ["show bgp summary json"]) == [
        "docker", "exec", "clab-hpn-s0r0a", "vtysh", "-c", "show bgp summary json"]
    assert rt.vtysh_argv("s0r0a", [], tty=True)[:3] == ["docker", "exec", "-it"]
    assert rt.topology_file == tmp_path / "hpn" / "config" / "hpn.clab.yml"
    assert rt.status_path("s0h0") == tmp_path / "hpn" / "config" / "s0h0" / "run" / "status.json"


def test_generated_binds_match_where_the_runtime_reads_agent_status():
    from hpnlab.node.agents import boot

    topo = build(load_spec())
    doc = yaml.safe_load(render(topo)[f"{topo.name}.clab.yml"])
    for name, node in doc["topology"]["nodes"].items():
        binds = dict(b.split(":")[:2] for b in node["binds"])
        assert binds[f"{name}/node.json"] == str(boot.NODE_JSON)  # where the node's boot reads its plan
        role = node["labels"]["hpnlab.role"]
        # every node reports boot.json there, agents their status: rt.node_run_dir(name) from outside
        assert binds[f"{name}/run"] == str(boot.RUN)
        if role != "host":
            assert binds[f"{name}/frr.conf"] == "/etc/frr/frr.conf"
    groups = doc["topology"]["groups"]
    assert groups["router"]["image"] == IMAGES["router"] and groups["host"]["image"] == IMAGES["host"]
    assert groups["router"]["sysctls"]["net.ipv6.conf.all.disable_ipv6"] == 0  # BGP over link-local


# --- images ------------------------------------------------------------------------------------------------
def test_image_build_and_base_commands():
    from hpnlab.runtime import containers as images

    argv = images.build_argv("router", "hpnlab/base:bookworm")
    assert argv[:4] == ["docker", "build", "-t", IMAGES["router"]]
    assert "BASE=hpnlab/base:bookworm" in argv and "ROLE=router" in argv and argv[-1] == str(ROOT)
    assert Path(argv[argv.index("-f") + 1]).exists()
    deb = images.debootstrap_argv(Path("/x"), images.DEFAULT_MIRROR)
    include = deb[2].split("=", 1)[1].split(",")
    assert {"frr", "python3-pyroute2", "iperf3", "nftables"} <= set(include)
    text = (ROOT / "docker" / "Dockerfile").read_text()
    assert "docker/${ROLE}/packages" in text and "COPY lab/node /opt/hpnlab/hpnlab/node" in text
    assert "frr" in images.packages("router") and "iperf3" in images.packages("host")


# --- the GitHub Actions workflow -----------------------------------------------------------------------------
def test_workflow_is_valid_and_runs_the_clab_suite():
    wf = ROOT / ".github" / "workflows" / "clab.yml"
    doc = yaml.safe_load(wf.read_text())
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on:` key as True
    assert "push" in on and "pull_request" in on
    steps = [s for job in doc["jobs"].values() for s in job["steps"]]
    uses = [s["uses"] for s in steps if "uses" in s]
    assert all(u.split("@")[0] in {"actions/checkout", "actions/setup-python", "actions/upload-artifact"}
               for u in uses), uses
    assert all("@v" in u for u in uses)
    script = "\n".join(s.get("run", "") for s in steps)
    for needed in ("get.containerlab.dev", "hpnlab images build", "HPNLAB_TEST_RUNTIME=clab", "./bootstrap test tests/test_runtimes.py"):
        assert needed in script, needed


# --- the wrapper's error paths, with stand-in binaries ------------------------------------------------------
FAKE_CLAB = r"""#!/bin/sh
# stand-in containerlab: records its argv, then does what FAKE_CLAB_<VERB> says
echo "$*" >> "$FAKE_LOG"
case "$1" in
  deploy)
    case "$FAKE_DEPLOY" in
      fail) echo 'Error: failed to create container clab-x: image not found' >&2; exit 1 ;;
      hang) exec sleep "$FAKE_SLEEP" ;;
      *) exit 0 ;;
    esac ;;
  destroy) [ "$FAKE_DESTROY" = fail ] && { echo 'Error: docker daemon gone' >&2; exit 1; }; exit 0 ;;
  inspect) printf '%s' "$FAKE_INSPECT"; exit 0 ;;
esac
exit 0
"""
FAKE_DOCKER = r"""#!/bin/sh
# stand-in docker: an engine with the images present and no containers (or FAKE_PS ones)
echo "$*" >> "$FAKE_LOG.docker"
case "$1" in
  info) echo 20.10.24 ;;
  ps) printf '%s' "$FAKE_PS" ;;
  exec) exit 1 ;;
esac
exit 0
"""


def _need_root():
    if os.geteuid() != 0:
        print("SKIP: the up/down/status commands need root", file=sys.stderr)
        pytest.skip("the up/down/status commands need root")


@pytest.fixture
def fake(tmp_path):
    _need_root()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("containerlab", FAKE_CLAB), ("docker", FAKE_DOCKER)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    state = tmp_path / "state"
    spec = tmp_path / "fk.yml"
    spec.write_text((ROOT / "examples" / "default.yml").read_text().replace("name: hpn", "name: fk"))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HPNLAB_STATE_ROOT": str(state),
           "FAKE_LOG": str(tmp_path / "calls.log")}

    class Fake:
        def __init__(self):
            self.env, self.state, self.spec, self.bin = env, state, spec, bin_dir

        def hpnlab(self, *args, timeout=60, **extra):
            return subprocess.run([sys.executable, "-m", "hpnlab.cli", *args], capture_output=True, text=True,
                                  cwd=ROOT, env={**self.env, **extra}, timeout=timeout)

        def calls(self) -> list[str]:
            p = Path(env["FAKE_LOG"])
            return p.read_text().splitlines() if p.exists() else []

        def leftovers(self) -> list[str]:
            ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
            out = [n for n in ns if n.startswith("clab-fk-")]
            out += [str(p) for p in self.state.glob("*")]
            return out

    return Fake()


def _one_line_error(r, *needles):
    lines = [x for x in r.stderr.splitlines() if x.startswith("hpnlab: error:")]
    assert r.returncode != 0 and len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_containerlab_missing_says_how_to_install_or_use_netns(fake):
    (fake.bin / "containerlab").unlink()
    path = ":".join(p for p in fake.env["PATH"].split(":") if not (Path(p) / "containerlab").exists())
    r = fake.hpnlab("up", str(fake.spec), "--runtime", "clab", PATH=path)
    _one_line_error(r, "containerlab not found", "get.containerlab.dev", "--runtime netns")
    assert r.returncode == 1 and fake.leftovers() == []


def test_missing_image_points_at_images_build(fake):
    (fake.bin / "docker").write_text(FAKE_DOCKER.replace("info) echo 20.10.24 ;;",
                                                         "info) echo 20.10.24 ;;\n  image) exit 1 ;;"))
    r = fake.hpnlab("up", str(fake.spec), "--runtime", "clab")
    _one_line_error(r, IMAGES["router"], "hpnlab images build")
    assert fake.calls() == [] and fake.leftovers() == []


def test_deploy_failure_shows_containerlab_error_and_rolls_back(fake):
    r = fake.hpnlab("up", str(fake.spec), "--runtime", "clab", FAKE_DEPLOY="fail")
    _one_line_error(r, "containerlab deploy: exit 1", "image not found")
    calls = fake.calls()
    topo = fake.state / "fk" / "config" / "fk.clab.yml"
    assert calls == [f"deploy -t {topo}", f"destroy --cleanup -t {topo}"], calls
    assert "rolling back" in r.stderr and fake.leftovers() == []


def test_deploy_timeout_kills_containerlab_and_rolls_back(fake):
    r = fake.hpnlab("up", str(fake.spec), "--runtime", "clab", FAKE_DEPLOY="hang", FAKE_SLEEP="30.4321",
                    HPNLAB_CLAB_TIMEOUT="1.5")
    _one_line_error(r, "containerlab deploy: timed out after 1.5 s")
    assert [c.split()[0] for c in fake.calls()] == ["deploy", "destroy"]
    assert fake.leftovers() == []
    # the timed-out containerlab was killed, not left running
    assert subprocess.run(["pgrep", "-f", "sleep 30.4321"], capture_output=True).returncode == 1


def test_deploy_returning_without_namespaces_is_an_error_and_rolls_back(fake):
    r = fake.hpnlab("up", str(fake.spec), "--runtime", "clab")  # the stand-in deploys nothing
    _one_line_error(r, "/run/netns/clab-fk-", "is missing")
    assert [c.split()[0] for c in fake.calls()] == ["deploy", "destroy"] and fake.leftovers() == []


def test_same_named_containerlab_lab_is_never_adopted(fake):
    r = fake.hpnlab("up", str(fake.spec), "--runtime", "clab", FAKE_PS="4f2a9c01\n")
    _one_line_error(r, "containers of a containerlab lab named 'fk' already exist")
    assert fake.calls() == [] and fake.leftovers() == []  # neither deployed nor destroyed


def _fake_running_lab(fake) -> Path:
    """A lab state as a clab deploy leaves it, without containers (for status/down paths)."""
    from hpnlab.generate import render as rnd

    cfg = fake.state / "fk" / "config"
    rnd.write(rnd.render(build(load_spec(fake.spec))), cfg)
    (fake.state / "fk" / "state.json").write_text(json.dumps(
        {"lab": "fk", "runtime": "clab", "config": str(cfg), "netns": ["clab-fk-s0h0"],
         "clab_topology": str(cfg / "fk.clab.yml")}))
    return cfg


def test_status_reads_both_inspect_shapes_and_rejects_malformed(fake):
    _fake_running_lab(fake)
    row = {**ROW, "lab_name": "fk", "name": "clab-fk-s0h0"}
    for doc in ({"containers": [row]}, {"fk": [row]}):
        r = fake.hpnlab("status", "--lab", "fk", "--json", FAKE_INSPECT=json.dumps(doc))
        st = json.loads(r.stdout)
        nodes = {n["node"]: n for n in st["nodes"]}
        assert st["runtime"] == "clab" and nodes["s0h0"]["container"] == "running"
        assert nodes["s0r0a"]["container"] == "missing" and st["healthy"] is False and r.returncode == 1
    r = fake.hpnlab("status", "--lab", "fk", FAKE_INSPECT="level=info msg=no lab\n{\"fk\": [")
    _one_line_error(r, "containerlab inspect printed no valid JSON")
    assert (fake.state / "fk" / "state.json").exists()  # status never changes a lab


def test_down_runs_destroy_cleanup_and_keeps_state_if_it_fails(fake):
    cfg = _fake_running_lab(fake)
    r = fake.hpnlab("down", "--lab", "fk", FAKE_DESTROY="fail")
    _one_line_error(r, "containerlab destroy: exit 1", "docker daemon gone", "hpnlab down --lab fk")
    assert (fake.state / "fk" / "state.json").exists()  # so the user can retry
    r = fake.hpnlab("down", "--lab", "fk")
    assert r.returncode == 0, r.stderr
    assert fake.calls()[-1] == f"destroy --cleanup -t {cfg / 'fk.clab.yml'}" and fake.leftovers() == []

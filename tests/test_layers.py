"""The layering of the hpnlab package, read from the source (every import, function-level ones too):
no import cycles, no import runs up the layers (docs/contributing.md draws them), the library never
imports the CLI, the code that runs inside a node stays light and its agents and programs stay apart, no
folder grows past ~15 modules, and nothing is installed under a generic top-level name."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

# package -> folder, as pyproject.toml's package-dir maps them
PACKAGES = {"hpnlab": ROOT / "lab", "hpnlab.traffic": ROOT / "traffic"}
HEAVY = ("pydantic", "jinja2", "yaml", "matplotlib", "jsonschema")


def modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in PACKAGES.items():
        for p in sorted(folder.rglob("*.py")):
            rel = p.relative_to(folder).with_suffix("")
            parts = [x for x in rel.parts if x != "__init__"]
            name = ".".join([pkg, *parts])
            if name.startswith("hpnlab.traffic") and pkg == "hpnlab":
                continue
            out[name] = p
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """hpnlab modules imported anywhere in a module (a from-import of a submodule counts as that module)."""
    tree = ast.parse(path.read_text())
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg.split(".")[:len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in out if m in known and m != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {m: imports(m, p, known) for m, p in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_every_module_and_function_level_imports():
    g = graph()
    assert {"hpnlab.api", "hpnlab.lifecycle.orchestrate", "hpnlab.cli", "hpnlab.node.agents.tor", "hpnlab.traffic.runner"} <= set(g)
    assert "hpnlab.api" in g["hpnlab.traffic.runner"]
    # a function-level import is an edge too (the plugin imports the API inside its fixture)
    assert "hpnlab.api" in g["hpnlab.pytest_plugin"]


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_cycle_detector_finds_a_planted_cycle():
    g = {**graph()}
    g["hpnlab.model.spec"] = g["hpnlab.model.spec"] | {"hpnlab.lifecycle.orchestrate"}
    assert any("hpnlab.model.spec" in c and "hpnlab.lifecycle.orchestrate" in c for c in cycles(g))


def is_cli(m: str) -> bool:
    """The command line: hpnlab.cli, hpnlab.entry (the executable's first, import-free code) and
    hpnlab.__main__ (python -m hpnlab); beside them hpnlab.docgen, which writes the CLI's reference."""
    return m in ("hpnlab.cli", "hpnlab.entry", "hpnlab.__main__", "hpnlab.docgen") or m.startswith(("hpnlab.cli.", "hpnlab.docgen."))


def test_library_never_imports_the_cli():
    bad = {m: sorted(d for d in deps if is_cli(d)) for m, deps in graph().items() if not is_cli(m)}
    assert {m: d for m, d in bad.items() if d} == {}


def _in_node(m: str) -> bool:
    """A module of the node package (hpnlab.node.*; hpnlab.lifecycle.nodestate and hpnlab.machine.nodesetup are the controller's)."""
    return m == "hpnlab.node" or m.startswith("hpnlab.node.")


def test_node_code_imports_no_controller_module():
    for m, deps in graph().items():
        if _in_node(m):
            assert all(d == "hpnlab" or _in_node(d) for d in deps), (m, deps)


@pytest.mark.parametrize("mod", ["hpnlab.node.agents.tor", "hpnlab.node.agents.host", "hpnlab.node.programs.probe", "hpnlab.node.programs.allreduce",
                                 "hpnlab.node.programs.craft", "hpnlab.node.agents.lacp", "hpnlab.node.agents.agent"])
def test_node_modules_import_light(mod):
    """What runs in every node (and in the images) must not pull in the controller's dependencies."""
    code = f"import sys, {mod}; print(' '.join(sorted(m for m in sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=60)
    assert r.returncode == 0, r.stderr
    loaded = set(r.stdout.split())
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY)
    controller = sorted(m for m in loaded if m.startswith("hpnlab.") and not _in_node(m))
    assert heavy == [] and controller == [], (heavy, controller)


def test_installed_under_one_import_name_only():
    """`import hpnlab` works from anywhere; no top-level `lab` or `traffic` is installed."""
    code = ("import importlib.util as u, hpnlab; "
            "print(u.find_spec('lab') is None, u.find_spec('traffic') is None, hpnlab.__version__)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:2] == ["True", "True"]


def test_public_names_resolve_lazily():
    r = subprocess.run([sys.executable, "-c", "import sys, hpnlab; a = 'pydantic' in sys.modules; "
                        "hpnlab.Lab; print(a, 'pydantic' in sys.modules)"], capture_output=True, text=True,
                       cwd="/", timeout=60)
    assert r.stdout.split() == ["False", "True"], r.stderr


def test_fault_kinds_stand_below_the_runner_report_and_cli():
    """A fault kind is a small class in its own file: it may use the runtime and the lab's configs, never
    the experiment runner, the report or the command line."""
    g = graph()
    kinds = [m for m in g if m.startswith("hpnlab.traffic.faults")]
    assert len(kinds) >= 11  # base + one file per kind
    for m in kinds:
        bad = sorted(d for d in g[m] if d in ("hpnlab.traffic.runner", "hpnlab.traffic.output.report") or is_cli(d))
        assert bad == [], (m, bad)


def test_adding_a_fault_kind_is_one_file(tmp_path):
    """A kind registered from a file of its own is parsed, listed, applied and reverted like the shipped ones."""
    code = (
        "from hpnlab.traffic import faults\n"
        "from hpnlab.traffic.faults.base import FaultKind, register\n"
        "@register\n"
        "class Nop(FaultKind):\n"
        "    kind = 'nop'\n"
        "    help = 'does nothing'\n"
        "    def apply(self, inj, f):\n"
        "        inj.applied = f.label\n"
        "f = faults.parse({'kind': 'nop', 'node': 'x'}, 'fault')\n"
        "class RT:\n"
        "    class state:\n"
        "        class data:\n"
        "            faults = []\n"
        "        save = staticmethod(lambda: None)\n"
        "inj = faults.Injector(RT, {})\n"
        "inj.apply(f); inj.revert(f)\n"
        "print(inj.applied, 'nop' in faults.kinds(), inj.active)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["nop", "x", "True", "[]"], r.stderr[-1500:]


def test_no_test_module_is_imported_as_a_library():
    """Shared helpers live in tests/lib/; a test module importing another runs that module's tests' setup
    and ties them together."""
    bad = []
    for p in sorted((ROOT / "tests").glob("test_*.py")):
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests.test_"):
                bad.append(f"{p.name} imports {node.module}")
    assert bad == []


def test_workloads_stand_below_the_runner_report_and_cli_and_alone_name_node_programs():
    """A workload kind is a class in its own file; it never imports the experiment runner, the report or
    the command line, and the traffic programs it runs in the nodes are named only there (the probe
    tools of `hpnlab probe` are tools, not workloads: hpnlab.traffic.run.nodetools)."""
    import re

    g = graph()
    kinds = [m for m in g if m.startswith("hpnlab.traffic.workloads")]
    assert len(kinds) >= 6  # base, probe and one file per kind
    for m in kinds:
        bad = sorted(d for d in g[m] if d in ("hpnlab.traffic.runner", "hpnlab.traffic.output.report") or is_cli(d))
        assert bad == [], (m, bad)
    programs = re.compile(r'"hpnlab\\.node\\.(programs\\.(probe|allreduce|elephant)|linkstats)"')
    for m, path in modules().items():
        if programs.search(path.read_text()):
            assert m.startswith("hpnlab.traffic.workloads"), f"{m} builds a workload's command line"


def test_experiments_are_clients_of_the_lab_api():
    """The experiment runner and the workloads bring labs up, wait for them, apply faults and start
    programs only through hpnlab.Lab: they never import the orchestration or a runtime themselves, so
    what an experiment does is what a user's script with hpnlab.Lab can do."""
    g = graph()
    for m in [m for m in g if m == "hpnlab.traffic.runner" or m.startswith("hpnlab.traffic.workloads")]:
        bad = sorted(d for d in g[m] if d == "hpnlab.lifecycle.orchestrate" or d.startswith("hpnlab.runtime."))
        assert bad == [], (m, bad)


# The layers, bottom first (docs/contributing.md, "The map of the house"): a module may import its own
# layer and the ones below, never one above. A package's own __init__ (hpnlab, hpnlab.traffic) holds
# only lazy names and is no layer.
LAYERS: list[tuple[str, ...]] = [
    ("hpnlab.errors", "hpnlab.node", "hpnlab.web"),                      # what a node runs; the page assets
    ("hpnlab.model",),                                                   # the lab as data
    ("hpnlab.generate", "hpnlab.instrument", "hpnlab.machine"),          # configs, meters, the machine
    ("hpnlab.runtime",),                                                 # netns, clab, c9s
    ("hpnlab.lifecycle",),                                               # up, verify, down, state
    ("hpnlab.traffic.analysis", "hpnlab.traffic.faults", "hpnlab.traffic.output", "hpnlab.traffic.policies",
     "hpnlab.traffic.run", "hpnlab.traffic.workloads"),                  # what experiments use
    ("hpnlab.api", "hpnlab.pytest_plugin"),                              # hpnlab.Lab
    ("hpnlab.traffic.runner", "hpnlab.watch"),                           # the Lab's clients
    ("hpnlab.cli", "hpnlab.docgen", "hpnlab.entry", "hpnlab.__main__"),  # the command line
]
NO_LAYER = ("hpnlab", "hpnlab.traffic")


def layer_of(m: str) -> int | None:
    for i, prefixes in enumerate(LAYERS):
        if any(m == p or m.startswith(p + ".") for p in prefixes):
            return i
    return None


def upward(g: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} -> {d}" for m, deps in g.items() if m not in NO_LAYER
                  for d in deps if d not in NO_LAYER and layer_of(d) > layer_of(m))


def test_every_module_has_a_layer_and_no_import_runs_upwards():
    g = graph()
    assert sorted(m for m in g if m not in NO_LAYER and layer_of(m) is None) == []
    assert upward(g) == []


def test_the_layer_check_finds_a_planted_upward_import():
    g = {**graph()}
    g["hpnlab.model.spec"] = g["hpnlab.model.spec"] | {"hpnlab.lifecycle.orchestrate"}
    assert upward(g) == ["hpnlab.model.spec -> hpnlab.lifecycle.orchestrate"]


def test_a_nodes_agents_and_the_programs_experiments_run_stay_apart():
    """hpnlab.node.agents (what makes a switch or host) and hpnlab.node.programs (what experiments start)
    import the node package's shared modules, never each other; the shared modules import neither."""
    room = {m: (m.split(".")[2] if m.count(".") >= 3 and m.split(".")[2] in ("agents", "programs") else "shared")
            for m in graph() if _in_node(m)}
    g = graph()
    bad = [f"{m} -> {d}" for m, r in room.items() for d in g[m] if _in_node(d) and room[d] not in ("shared", r)]
    assert bad == []
    assert {"hpnlab.node.agents.tor", "hpnlab.node.programs.allreduce"} <= set(room)


def test_no_folder_holds_more_than_about_15_modules_flat():
    """A folder is one concern a newcomer can name; past ~15 modules it hides its parts (16: an __init__
    beside 15)."""
    counts = {}
    for folder in PACKAGES.values():
        for d in [folder, *[p for p in folder.rglob("*") if p.is_dir()]]:
            if (d / "__init__.py").exists():
                counts[str(d.relative_to(ROOT))] = len(list(d.glob("*.py")))
    assert {d: n for d, n in counts.items() if n > 16} == {}
    assert len(counts) >= 20


def test_pyproject_lists_every_package():
    """A folder with an __init__.py that pyproject.toml does not list is left out of a wheel (an editable
    install hides it)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for pkg, folder in PACKAGES.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder).parts
            found.add(".".join([pkg, *rel]))
    assert found - listed == set()


def test_one_progress_display():
    """Progress lines and bars come from hpnlab.machine.progress alone: no other module defines a progress class."""
    import re

    defined = [m for m, p in modules().items() if re.search(r"^class \w*(Progress|Bar)\b", p.read_text(), re.M)]
    assert defined == ["hpnlab.machine.progress"]

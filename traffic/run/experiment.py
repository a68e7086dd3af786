"""Experiment files: a base lab spec, variants of it, probes, a workload, a fault timeline, a duration
and repetitions. Loading validates everything up front (including that every fault names a real node
and interface of its variant's lab), so a typo fails in a second with one line, not after a deploy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hpnlab.errors import SpecError
from hpnlab.model.models import NodeConfig
from hpnlab.model.paths import data_dir
from hpnlab.model.spec import Spec, _field_path, merge, parse_spec, read_yaml, with_env_overrides
from hpnlab.traffic import faults as faultmod
from hpnlab.traffic import workloads
from hpnlab.traffic.workloads.base import WorkloadParams, check_hosts

EXPERIMENTS = data_dir("experiments")
SETTLE = 2.0  # seconds from one fault's repair to the next fault (1 s to settle, 1 s to count what is lost)
EXAMPLES = data_dir("examples")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Probe(_Strict):
    """Sequence-numbered UDP flows from one host to another on one rail."""
    name: str = Field(description="the stream's name in results.json and summary.txt")
    src: str = Field(description="the sending host, e.g. s0h0")
    dst: str = Field(description="the receiving host, e.g. s1h0")
    rail: int = Field(0, ge=0, description="which NIC (rail) of the two hosts")
    flows: int = Field(16, ge=1, le=1024, description="5-tuples (source ports) so every ECMP path is covered")
    rate: float = Field(250.0, gt=0, le=20000, description="packets/s per flow")
    size: int = Field(64, ge=24, le=1400, description="UDP payload bytes")


class Workload(BaseModel):
    """The training-like traffic beside the probes: ``kind`` and that kind's own keys (below, per kind)."""

    model_config = ConfigDict(extra="allow")  # each kind's keys are checked by its own model (Params)
    kind: str = Field("none", description="which workload: " + "; ".join(
        f"{k}: {v.help}" for k, v in workloads.REGISTRY.items()))

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if v not in workloads.REGISTRY:
            raise ValueError(f"must be one of {', '.join(workloads.REGISTRY)}")
        return v


class Variant(_Strict):
    """One lab the experiment runs: the file's spec with these overrides; what it leaves out comes from the file."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,40}$", description="the variant's name (results.json, --variants)")
    description: str = Field("", description="one line for the summary and the plot")
    spec: dict[str, Any] = Field({}, description="spec keys merged over the file's spec, e.g. {tier2: clos}")
    probes: list[Probe] | None = Field(None, description="instead of the file's probes")
    workload: Workload | None = Field(None, description="instead of the file's workload")
    faults: list[dict[str, Any]] | None = Field(None, description="instead of the file's faults")
    duration: float | None = Field(None, ge=2, le=600, description=(
        "seconds of traffic per repetition, instead of the file's (a variant whose timers are dilated needs "
        "a longer window); --duration overrides both"))
    prober: dict[str, Any] | None = Field(None, description=(
        "run the black-box prober (hpnlab.traffic.run.prober) through every repetition, with these settings ({} for "
        "its defaults: rate, window_s, min_lost, ...); per fault: when it suspected and confirmed a link, and "
        "which (default: off)"))
    isolation: dict[str, Any] | None = Field(None, description=(
        "take the prober's confirmed links out of service (hpnlab.traffic.run.isolation), with these settings ({} for "
        "its defaults: action, max_isolations, window_s, hold_s); a gray fault's link is put back at its repair; "
        "needs prober (default: off)"))


class ExperimentFile(_Strict):
    """An experiment: a base spec, variants of it, probes, a workload, a fault timeline."""

    name: str = Field(description="the experiment's name")
    description: str = Field("", description="one line for the summary")
    spec: str | None = Field(None, description=(
        "the base lab spec: a path relative to this file, or an example's name from any folder (default, "
        "clos.yml, examples/segment.yml: a file in examples/); left out: examples/default.yml"))
    duration: float = Field(10.0, ge=2, le=600, description="seconds of traffic per repetition")
    repetitions: int = Field(1, ge=1, le=50, description="repetitions per variant (each figure is min/median/max over them)")
    up_timeout: float = Field(120.0, ge=10, le=3600, description=(
        "seconds each variant's lab may take to come up healthy (raise it for a large lab on a busy machine)"))
    lab_prefix: str = Field("xp", pattern=r"^[a-z][a-z0-9]{0,6}$", description="variant i's lab is named <lab_prefix><i>")
    probes: list[Probe] = Field([], description="probe streams (below)")
    workload: Workload = Field(Workload(), description="the workload (below)")
    faults: list[dict[str, Any]] = Field([], description="the fault timeline (below)")
    variants: list[Variant] = Field([Variant(name="default")], description="the labs to run (below)")


class Plan:
    """One variant, fully resolved: its lab spec, node configs, probes, workload and faults."""

    def __init__(self, name: str, description: str, spec: Spec, overrides: dict, cfgs: dict[str, NodeConfig],
                 probes: list[Probe], workload: WorkloadParams, faults: list[faultmod.Fault],
                 prober: dict | None = None, isolation: dict | None = None):
        self.name, self.description, self.spec, self.overrides = name, description, spec, overrides
        self.cfgs, self.probes, self.workload, self.faults = cfgs, probes, workload, faults
        self.prober, self.isolation = prober, isolation  # None: off (hpnlab.traffic.run.graywatch)
        self.flows: list[dict] = []  # elephant workload: this repetition's flows (from the path map)
        self.sports: dict[tuple[int, str], list[int]] = {}  # all-reduce placement disjoint: (rail, host) -> bound ports
        self.source: Path | None = None  # the experiment file (a command workload's {here} is its folder)
        self.duration: float = 10.0  # seconds of traffic per repetition (the variant's, else the file's)

    def host_ip(self, host: str, rail: int) -> str:
        return self.cfgs[host].nic(rail).ip

    def ring(self) -> list[str]:
        return getattr(self.workload, "hosts", None) or sorted(n for n, c in self.cfgs.items() if c.role == "host")


class Experiment:
    def __init__(self, path: Path, doc: ExperimentFile, plans: list[Plan]):
        self.path, self.doc, self.plans = path, doc, plans

    @property
    def name(self) -> str:
        return self.doc.name


def node_configs(spec: Spec) -> dict[str, NodeConfig]:
    """The node.json of every node, exactly as a deploy renders them (pure)."""
    from hpnlab.generate import render
    from hpnlab.model import topology

    files = render.render(topology.build(spec))
    return {p.split("/")[0]: NodeConfig.model_validate_json(t) for p, t in files.items() if p.endswith("/node.json")}


def check_gray(v: Variant, where: str) -> None:
    """A variant's prober and isolation settings name only the services' own keys (one line, before a lab)."""
    from hpnlab.traffic.run import isolation, prober

    for key, given, known in (("prober", v.prober, prober.DEFAULTS), ("isolation", v.isolation, isolation.DEFAULTS)):
        bad = sorted(set(given or {}) - set(known))
        if bad:
            raise SpecError(f"{where} {key}.{bad[0]}: unknown setting; use {', '.join(known)}")
    if v.isolation is not None and v.prober is None:
        raise SpecError(f"{where} isolation: isolates what the prober confirms; give prober too ({{}} for its defaults)")


def find(name: str | Path) -> Path:
    """An experiment file: the path given, or the name of a shipped one (``link-failure``)."""
    path = Path(name)
    for cand in (path, EXPERIMENTS / str(name), EXPERIMENTS / f"{name}.yml"):
        try:
            if cand.is_file():
                return cand
        except OSError:  # a name too long for a path: load() says so in one line
            pass
    return path


def examples() -> list[str]:
    """The names of the shipped example specs (default, clos, ...)."""
    return sorted(q.stem for q in EXAMPLES.glob("*.yml"))


def base_spec(path: Path, spec: str | None) -> Path:
    """An experiment file's base spec: left out, the default example; else a path relative to the file, else an
    example's name (``default``, ``default.yml``, ``examples/default.yml``) wherever the file is."""
    if not spec:
        return EXAMPLES / "default.yml"
    given = path.parent / spec
    try:
        if given.exists():  # a file, or something the spec loader refuses by name (a directory, a device)
            return given
    except OSError:  # a name too long for a path: not a file, maybe an example's name
        pass
    stem = Path(spec).name.removesuffix(".yml").removesuffix(".yaml")
    if stem in examples() and Path(spec).parent.name in ("", "examples"):
        return EXAMPLES / f"{stem}.yml"
    raise SpecError(f"{path}: experiment field 'spec': '{spec[:120]}' not found: not a file relative to "
                    f"{path.parent}, nor an example ({', '.join(examples())}); left out, it is default")


def load(path: str | Path, only: list[str] | None = None, repetitions: int | None = None,
         duration: float | None = None) -> Experiment:
    p = Path(path)
    try:
        missing = not p.exists() and not p.is_symlink()
    except OSError:
        missing = False  # read_yaml reports why it cannot be read
    if missing:
        raise SpecError(f"experiment file '{str(p)[:120]}' not found (shipped ones are in {EXPERIMENTS})")
    data = read_yaml(p, "experiment file")
    if not isinstance(data, dict):
        raise SpecError(f"{p}: top level must be a mapping with name, duration, probes, faults, variants")
    try:
        doc = ExperimentFile.model_validate(data)
    except ValidationError as err:
        e = err.errors(include_url=False)[0]
        msg = "unknown key; remove it or check spelling" if e["type"] == "extra_forbidden" else e["msg"]
        raise SpecError(f"{p}: experiment field '{_field_path(e['loc'])}': {msg}") from None
    # Command-line overrides obey the file's own bounds.
    if repetitions is not None:
        if not 1 <= repetitions <= 50:
            raise SpecError(f"--repetitions {repetitions}: give 1 to 50")
        doc.repetitions = repetitions
    if duration is not None:
        if not 2 <= duration <= 600:  # also false for NaN
            raise SpecError(f"--duration {duration:g}: give 2 to 600 seconds")
        doc.duration = duration
    names = [v.name for v in doc.variants]
    if len(set(names)) != len(names):
        raise SpecError(f"{p}: experiment field 'variants': names must be unique (got {', '.join(names)})")
    if only:
        unknown = [v for v in only if v not in names]
        if unknown:
            raise SpecError(f"--variants: '{unknown[0]}' is not in {p.name}; it has {', '.join(names)}")
    base_path = base_spec(p, doc.spec)
    base = read_yaml(base_path, f"{p.name}: experiment field 'spec':")
    if base is not None and not isinstance(base, dict):
        raise SpecError(f"{p}: experiment field 'spec': '{base_path}' is not a lab spec (a mapping of keys)")
    base, _ = with_env_overrides(base or {}, str(base_path))  # HPNLAB_SPEC_OVERRIDES, before each variant's own
    plans = []
    for i, v in enumerate(doc.variants):
        if only and v.name not in only:
            continue
        where = f"{p.name}: variants.{i} ({v.name})"
        merged = merge(base, v.spec)
        merged["name"] = f"{doc.lab_prefix}{i}"
        spec = parse_spec(merged, where + " spec")
        cfgs = node_configs(spec)
        probes = v.probes if v.probes is not None else doc.probes
        given = v.workload if v.workload is not None else doc.workload
        workload = workloads.get(given.kind).parse(given.model_dump(), f"{p.name}: variants.{i} ({v.name})")
        for j, pr in enumerate(probes):
            check_hosts(f"{where} probes.{j}", [pr.src, pr.dst], cfgs, pr.rail)
            if pr.src == pr.dst:
                raise SpecError(f"{where} probes.{j}: src and dst are the same host")
        workloads.get(workload.kind).check(workload, spec, cfgs, where)
        raw = v.faults if v.faults is not None else doc.faults
        fl = [faultmod.parse(d, f"{where} faults.{j}", cfgs) for j, d in enumerate(raw)]
        dur = duration if duration is not None else (v.duration or doc.duration)
        for j, f in enumerate(fl):
            if f.at >= dur or (f.until or 0) > dur:
                raise SpecError(f"{where} faults.{j}: at/until must lie within duration ({dur:g} s)")
        order = sorted(range(len(fl)), key=lambda j: fl[j].at)
        for a, b in zip(order, order[1:]):  # each fault's effects are judged until the next one starts
            fa, fb = fl[a], fl[b]
            # 'lost after repair' counts what was sent from 1 s after a repair until the next fault, so
            # that window must exist: at least 2 s between one repair and the next fault.
            if fa.until is None or fb.at < fa.until + SETTLE:
                raise SpecError(f"{where} faults.{b}: starts at {fb.at:g} s, within faults.{a}'s window "
                                f"(until {'the end' if fa.until is None else f'{fa.until:g} s'} + {SETTLE:g} s "
                                f"after its repair); give it at >= {(fa.until or dur) + SETTLE:g} so loss "
                                f"is attributed to the right fault")
        check_gray(v, where)
        plans.append(Plan(v.name, v.description, spec, v.spec, cfgs, probes, workload, fl, v.prober, v.isolation))
        plans[-1].source = p
        plans[-1].duration = dur
    return Experiment(p, doc, plans)

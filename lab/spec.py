"""The lab spec: one small YAML file, validated strictly so mistakes surface before any file is written."""

from __future__ import annotations

import copy
import ipaddress
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hpnlab.errors import SpecError
from hpnlab.paths import data_dir

VIRTUAL_MAC = "00:00:5e:00:01:01"
MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
NAME_RE = re.compile(r"[a-z][a-z0-9]{0,9}")  # always fullmatch: '$' would accept a trailing newline
NAME_RULE = ("must be 1-10 characters, lowercase letters and digits, starting with a letter "
             "(it prefixes namespaces and container names)")
EXAMPLES = data_dir("examples")
DEFAULT_SPEC = EXAMPLES / "default.yml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tier3(_Strict):
    """Optional core layer; cores are dual-plane like the aggs."""

    cores_per_plane: int = Field(1, ge=1, le=64)
    oversubscription: float = Field(15.0, ge=1.0, le=64.0)


class ASN(_Strict):
    """Leaves get unique ASNs; a plane's aggs (and cores) share one, as in the paper's eBGP design."""

    tor_base: int = Field(65100, ge=1, le=4294967295)
    agg_base: int = Field(65000, ge=1, le=4294967295)
    core_base: int = Field(64900, ge=1, le=4294967295)


class Addressing(_Strict):
    hosts: str = "10.0.0.0/16"
    loopbacks: str = "10.255.0.0/16"

    @field_validator("hosts", "loopbacks")
    @classmethod
    def _cidr(cls, v: str) -> str:
        try:
            net = ipaddress.IPv4Network(v, strict=True)
        except ValueError as e:
            raise ValueError(f"must be an IPv4 network in CIDR form like 10.0.0.0/16 ({e})") from None
        if net.prefixlen > 24:
            raise ValueError("must be /24 or larger (one /24 per dual-ToR set)")
        return v


class PortOffsets(_Strict):
    a: int = 300
    b: int = 600


class LACP(_Strict):
    system_mac: str = VIRTUAL_MAC
    system_priority: int = Field(65535, ge=1, le=65535)
    key: int = Field(1, ge=1, le=65535)
    port_offsets: PortOffsets = PortOffsets()
    fast_rate: bool = True

    @field_validator("system_mac")
    @classmethod
    def _mac(cls, v: str) -> str:
        v = v.lower()
        if not MAC_RE.fullmatch(v):
            raise ValueError("must be a MAC like 00:00:5e:00:01:01")
        if int(v[:2], 16) & 1:
            raise ValueError("must be a unicast MAC (first octet even)")
        return v

    @model_validator(mode="after")
    def _offsets(self) -> "LACP":
        a, b = self.port_offsets.a, self.port_offsets.b
        for side, off in (("a", a), ("b", b)):
            if not 256 < off <= 65535 - 256:
                raise ValueError(f"port_offsets.{side} must be > 256 and <= 65279 (got {off}): ToRs have < 256 ports")
        if abs(a - b) < 256:
            raise ValueError(f"port_offsets a={a} and b={b} must differ by >= 256 so port IDs never clash")
        return self


class BGP(_Strict):
    keepalive: int = Field(1, ge=1, le=60)
    hold: int = Field(3, ge=3, le=180)

    @model_validator(mode="after")
    def _hold(self) -> "BGP":
        if self.hold < 3 * self.keepalive:
            raise ValueError(f"hold ({self.hold}) must be >= 3 x keepalive ({self.keepalive})")
        return self


class BFD(_Strict):
    enabled: bool = True
    interval_ms: int = Field(100, ge=10, le=60000)
    multiplier: int = Field(3, ge=2, le=255)


class Mechanisms(_Strict):
    """Each switch turns one non-stacked dual-ToR mechanism off, for ablations."""

    lacp: bool = True
    arp_proxy: bool = True
    host_routes: bool = True
    arp_duplication: bool = True


class Spec(_Strict):
    name: str = "hpn"
    segments: int = Field(2, ge=1, le=64)
    hosts_per_segment: int = Field(2, ge=1, le=128)
    rails: int = Field(2, ge=1, le=8)
    access: Literal["dual-tor", "single-tor"] = "dual-tor"
    tier2: Literal["dual-plane", "clos"] = "dual-plane"
    aggs_per_plane: int = Field(2, ge=1, le=128)
    tier3: Tier3 | None = None
    asn: ASN = ASN()
    addressing: Addressing = Addressing()
    lacp: LACP = LACP()
    bgp: BGP = BGP()
    bfd: BFD = BFD()
    mechanisms: Mechanisms = Mechanisms()
    host_driver: Literal["auto", "userspace", "bond"] = "auto"

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.fullmatch(v):
            raise ValueError(NAME_RULE)
        return v

    @model_validator(mode="after")
    def _cross(self) -> "Spec":
        sets = self.segments * self.rails
        hosts = ipaddress.IPv4Network(self.addressing.hosts)
        have = 2 ** (24 - hosts.prefixlen)
        if sets > have:
            raise ValueError(f"addressing.hosts {hosts} holds {have} /24s but {sets} dual-ToR sets "
                             f"(segments x rails) need one each; use a larger pool")
        loops = ipaddress.IPv4Network(self.addressing.loopbacks)
        if self.router_count() > loops.num_addresses - 2:
            raise ValueError(f"addressing.loopbacks {loops} has too few addresses for {self.router_count()} routers")
        if hosts.overlaps(loops):
            raise ValueError("addressing.loopbacks must not overlap addressing.hosts")
        if self.tier2 == "dual-plane" and self.access == "single-tor":
            # A single ToR must reach both planes: that is a Clos, say so instead of guessing.
            raise ValueError("tier2 'dual-plane' needs access 'dual-tor' (ToR a -> plane 0, ToR b -> plane 1); "
                             "use tier2 'clos' with single-tor")
        asns = [(self.asn.tor_base, self.asn.tor_base + self.tor_count() - 1),
                (self.asn.agg_base, self.asn.agg_base + 1), (self.asn.core_base, self.asn.core_base + 1)]
        if asns[0][1] > 4294967295:
            raise ValueError("asn.tor_base + number of ToRs exceeds 4294967295")
        for i, (lo1, hi1) in enumerate(asns):
            for lo2, hi2 in asns[i + 1:]:
                if lo1 <= hi2 and lo2 <= hi1:
                    raise ValueError("asn ranges overlap: ToRs use tor_base..tor_base+#ToRs-1, "
                                     "aggs agg_base..agg_base+1, cores core_base..core_base+1")
        return self

    # Derived sizes (pure, used by validation and the topology builder).
    @property
    def planes(self) -> int:
        return 2 if self.tier2 == "dual-plane" else 1

    @property
    def tors_per_set(self) -> int:
        return 2 if self.access == "dual-tor" else 1

    def tor_count(self) -> int:
        return self.segments * self.rails * self.tors_per_set

    def agg_count(self) -> int:
        return self.aggs_per_plane * self.planes

    def core_count(self) -> int:
        return self.tier3.cores_per_plane * self.planes if self.tier3 else 0

    def router_count(self) -> int:
        return self.tor_count() + self.agg_count() + self.core_count()


def check_lab_name(name: str, field: str = "lab name") -> str:
    """A lab name wherever it enters (spec, --lab, the API): never a path, never a shell word."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        shown = repr(name[:40]) + ("..." if isinstance(name, str) and len(name) > 40 else "") \
            if isinstance(name, str) else repr(name)
        raise SpecError(f"{field} {shown}: {NAME_RULE}")
    return name


def _field_path(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "spec"


def _format_error(err: ValidationError) -> str:
    e = err.errors(include_url=False)[0]
    field = _field_path(e["loc"])
    kind = e["type"]
    if kind == "extra_forbidden":
        return f"spec field '{field}': unknown key; remove it or check spelling (see examples/default.yml)"
    msg = e["msg"].removeprefix("Value error, ")
    got = e.get("input")
    if kind in ("missing",):
        return f"spec field '{field}': required"
    shown = "" if isinstance(got, (dict, list)) or got is None else f" (got {got!r})"
    return f"spec field '{field}': {msg}{shown}"


def parse_spec(data: Any, source: str = "spec") -> Spec:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(f"{source}: top level must be a mapping of keys like 'name:' and 'segments:'")
    try:
        return Spec.model_validate(data)
    except ValidationError as err:
        raise SpecError(f"{source}: {_format_error(err)}") from None


def find_spec(path: str | Path | None) -> Path:
    """A spec file: the path given, or a shipped example by name ('clos', 'segment.yml'); default: default.yml."""
    if not path:
        return DEFAULT_SPEC
    p = Path(path)
    if not p.exists():
        for cand in (EXAMPLES / str(path), EXAMPLES / f"{path}.yml"):
            if cand.is_file():
                return cand
    return p


def load_spec_data(path: str | Path | None = None) -> tuple[Any, str]:
    """The YAML of a spec file, unvalidated (for merging overrides), and the name to report it by."""
    p = find_spec(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise SpecError(f"spec file '{p}' not found; give a path to a YAML spec or omit it for the default") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
        raise SpecError(f"spec file '{p}' cannot be read: {e.__class__.__name__}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(f"{p}: malformed YAML{where}: {getattr(e, 'problem', None) or e}") from None
    return data, str(p)


def merge(base: Any, over: dict) -> dict:
    """``over`` merged into ``base`` key by key (nested mappings merged, everything else replaced)."""
    out = copy.deepcopy(base) if isinstance(base, dict) else {}
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def load_spec(path: str | Path | None = None) -> Spec:
    data, where = load_spec_data(path)
    return parse_spec(data, where)

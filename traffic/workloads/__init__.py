"""Workloads: the traffic an experiment runs beside its probes, one registered class per kind, one file
each (base.py holds the hooks and the registry); ``probe`` (sequence-numbered UDP flows) is the one place
a probe's command line is built, for experiments and ``hpnlab.Lab.probes`` alike. A new kind is one file
in this folder: every module here is imported, and its ``@register`` adds it."""

import importlib
import pkgutil

from hpnlab.traffic.workloads.base import REGISTRY, WorkloadKind, WorkloadParams, get, names, register  # noqa: F401

for _m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_m}")

"""Workloads: the traffic an experiment runs beside its probes, one registered class per kind, one file
each (base.py holds the hooks and the registry); ``probe`` (sequence-numbered UDP flows) is the one place
a probe's command line is built, for experiments and ``hpnlab.Lab.probes`` alike. A new kind is one file
imported here."""

from hpnlab.traffic.workloads.base import REGISTRY, WorkloadKind, get, names, register  # noqa: F401
from hpnlab.traffic.workloads import allreduce, elephant, iperf3, none  # noqa: F401,E402

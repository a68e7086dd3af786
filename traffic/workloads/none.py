"""none: probes only, no workload."""

from hpnlab.traffic.workloads.base import WorkloadKind, register


@register
class NoWorkload(WorkloadKind):
    kind = "none"
    help = "probes only"
    tcp = False  # the probes are UDP: workload.congestion does not apply

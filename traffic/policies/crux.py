"""crux and its ablations: priorities by GPU intensity (P = k * I) compressed onto the switches' K queues,
and least-congested path placement in priority order (hpnlab.traffic.policies.arithmetic).

- ``crux``: both;
- ``crux-priority-only``: the priorities, paths left to the switches' hash;
- ``crux-paths-only``: the placement, every job in one class (needs no switch QoS)."""

import hpnlab.traffic.policies.arithmetic as crux
from hpnlab.traffic.policies.base import Inputs, Policy, register


def placed(x: Inputs, prio: dict) -> dict:
    order = crux.order(prio)
    return crux.place([(j, x.candidates[j], x.bytes_per_conn[j]) for j in order], x.capacity)


@register
class Crux(Policy):
    name = "crux"
    help = "GPU-intensity priorities compressed onto the queues, and least-congested paths in that order"

    def assign(self, x: Inputs) -> dict:
        inten, prio = self.intensities(x)
        rows = placed(x, prio)
        levels, comp = self.levels(x, prio, rows)
        return {"jobs": self.out(x, inten, prio, levels, rows), "compression": comp}


@register
class CruxPriorityOnly(Policy):
    name = "crux-priority-only"
    help = "Crux's priorities and compression; paths by the switches' hash"

    def assign(self, x: Inputs) -> dict:
        inten, prio = self.intensities(x)
        levels, comp = self.levels(x, prio, x.hashed)
        return {"jobs": self.out(x, inten, prio, levels, x.hashed), "compression": comp}


@register
class CruxPathsOnly(Policy):
    name = "crux-paths-only"
    help = "Crux's least-congested placement in intensity order; one class for every job"
    uses_queues = False

    def assign(self, x: Inputs) -> dict:
        inten, prio = self.intensities(x)
        return {"jobs": self.out(x, inten, prio, None, placed(x, prio))}

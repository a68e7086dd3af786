"""fifo: no scheduling. Every job in one class (unmarked), every connection where the switches' hash puts it:
what a cluster without Crux does."""

from hpnlab.traffic.policies.base import Inputs, Policy, register


@register
class Fifo(Policy):
    name = "fifo"
    help = "one class for every job, paths by the switches' hash (no scheduling)"
    uses_queues = False

    def assign(self, x: Inputs) -> dict:
        inten, prio = self.intensities(x)
        return {"jobs": self.out(x, inten, prio, None, x.hashed)}

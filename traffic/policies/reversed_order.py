"""reversed: the control. Crux's priorities turned upside down (the least intensive job first), compressed
the same way, paths by the switches' hash: if intensity order matters, this should do worse than fifo."""

from hpnlab.traffic.policies.base import Inputs, Policy, register


@register
class Reversed(Policy):
    name = "reversed"
    help = "the control: the least GPU-intensive job highest, paths by the switches' hash"

    def assign(self, x: Inputs) -> dict:
        inten, prio = self.intensities(x)
        flipped = {j: 1.0 / p if p else float("inf") for j, p in prio.items()}
        levels, comp = self.levels(x, flipped, x.hashed)
        return {"jobs": self.out(x, inten, prio, levels, x.hashed), "compression": comp}

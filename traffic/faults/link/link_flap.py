"""link-flap: an interface down and up again, count times."""

from hpnlab.traffic.faults.base import FaultKind, register
from hpnlab.traffic.faults.link.link_down import LinkDown


@register
class LinkFlap(FaultKind):
    kind = "link-flap"
    help = "down/up every period/2 seconds, count times"
    needs_iface = True

    def apply(self, inj, f):
        def flap(stop):
            for _ in range(f.count):
                for ifc in f.ifaces:
                    inj.link(f.node, ifc, "down")
                if stop.wait(f.period / 2):
                    break
                for ifc in f.ifaces:
                    inj.link(f.node, ifc, "up")
                if stop.wait(f.period / 2):
                    break

        inj.start_thread(f, flap)

    def duration(self, f):
        return f.period * f.count

    revert = LinkDown.revert  # the flapping thread is stopped by the injector; the link ends up

"""hang: a node that stops (SIGSTOP of every process in it) with its links up; nothing gets in either."""

import signal

from hpnlab.traffic.faults.base import FaultKind, node_pids, nft_rules, register, send_signal


@register
class Hang(FaultKind):
    kind = "hang"
    help = "stop every process in the node (SIGSTOP: FRR, agent) and drop all its ingress; links stay up"
    freezes_node = True

    uses_nft = True

    def prepare(self, inj, f, fid):
        f.undo["stopped"] = [p for p in node_pids(inj.rt, f.node) if p not in inj.exclude]

    def apply(self, inj, f):
        for pid in f.undo["stopped"]:
            send_signal(pid, signal.SIGSTOP)
        inj.nft(f.node, nft_rules(f.undo["nft"], [(ifc, "ingress", "") for ifc in inj.ifaces(f.node)]), "hang")

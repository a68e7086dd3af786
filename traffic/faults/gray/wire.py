"""What the gray faults (silent-loss, corrupt, silent-corrupt, bursty-loss) share: a frame is hit on the
wire, that is at the receiving end's ingress, and each hit is drawn per frame.

Why the receiving end: a drop in the sending port's egress hook is reported back to a sending host's own
TCP (NET_XMIT_DROP), which resends at once and cuts its window: a local drop, not a lossy wire. The peer's
netdev ingress hook sees the frame after it left the sender for good, before the receiver's IP layer
checks it, so a flipped IPv4 header checksum is counted by that receiver (IpExtInCsumErrors) as a
switch's or host's next hop would count a bit flip. The ingress hook is in every kernel a lab runs on.

Why per frame: every lab interface caps GSO at one segment unless the spec sets ``links.offloads: true``;
with offloads a 64 KB super-packet would take ~45 frames with one draw, so a gray fault refuses such a
node (one line naming the field).

``iface`` names the link end whose transmitted frames are hit (node:iface -> its peer); ``both: 1`` hits
the frames it receives as well. Rates are percent of the frames, drawn with nftables' ``numgen random``
(1/10000 steps, as ``hpnlab impair loss=``).
"""

from __future__ import annotations

from hpnlab.errors import SpecError
from hpnlab.traffic.faults.base import FaultKind

STEPS = 10000  # numgen random mod STEPS: 0.01 % resolution


def check_rate(f, where: str, key: str = "rate") -> None:
    p = f.params[key]
    if not 0 < p <= 100:
        raise SpecError(f"{where}.{key}: give a percentage of the frames above 0 and at most 100, e.g. {key}: 1")
    if round(p * STEPS / 100) < 1:
        raise SpecError(f"{where}.{key}: {p:g} % is below the resolution of 0.01 %; give 0.01 or more")


def check_both(f, where: str) -> None:
    if f.params["both"] not in (0.0, 1.0):
        raise SpecError(f"{where}.both: give 0 (the frames {f.node}:{f.iface} sends) or 1 (both directions)")
    if len(f.ifaces) != 1:
        raise SpecError(f"{where}.iface: a gray fault acts on one link; give one interface")


def check_frames(f, where: str, cfgs) -> None:
    """Per frame, not per 64 KB super-packet: refuse the ends of a link whose spec keeps offloads."""
    ifc = cfgs[f.node].iface(f.iface)
    for node in (f.node, ifc.peer):
        if node in cfgs and cfgs[node].offloads:
            raise SpecError(f"{where}.kind: {f.kind} acts per MTU frame, but {node} keeps 64 KB offload "
                            f"buffers (spec links.offloads: true); set it false for gray faults")
        if node not in cfgs:
            raise SpecError(f"{where}.iface: {f.node}:{f.iface} leads to {node}, which is not a lab node")


def ends(cfgs, f) -> list[list[str]]:
    """[[receiving node, its interface], ...]: where the frames the fault hits arrive."""
    ifc = cfgs[f.node].iface(f.iface)
    out = [[ifc.peer, ifc.peer_iface]]
    if f.params.get("both"):
        out.append([f.node, f.iface])
    return out


def steps(pct: float) -> int:
    return max(1, round(pct * STEPS / 100))


def draw(pct: float) -> str:
    """An nftables match that is true for pct % of the frames (each rule draws anew)."""
    return "" if pct >= 100 else f"numgen random mod {STEPS} < {steps(pct)} "


def table_rules(table: str, iface: str, body: list[str], extra: str = "") -> str:
    """A netdev table with one ingress chain on iface holding body's rules (and extra chains/sets)."""
    lines = [f"table netdev {table} {{", extra.rstrip("\n"),
             "  chain c {", f"    type filter hook ingress device \"{iface}\" priority -500; policy accept;",
             *[f"    {r}" for r in body], "  }", "}"]
    return "\n".join(x for x in lines if x) + "\n"


def prepare(inj, f, fid: str) -> None:
    f.undo["wire"] = [[node, ifc, f"hpnlab_fault_{fid}"] for node, ifc in ends(inj.cfgs, f)]


def apply(inj, f, body: list[str], extra: str = "", what: str = "gray fault") -> None:
    for node, ifc, table in f.undo["wire"]:
        inj.nft(node, table_rules(table, ifc, body, extra), what)


def revert(rt, d) -> None:
    for node, _ifc, table in d.get("undo", {}).get("wire", []):
        rt.run(node, ["nft", "delete", "table", "netdev", table], check=False)


class WireFault(FaultKind):
    """A gray fault whose frames are hit by a rule each (silent-loss, corrupt, silent-corrupt): one link, a
    rate and ``both``, per MTU frame, in a netdev table at the receiving end(s). A kind gives ``rules``
    (the nftables rules, drawn per frame with ``draw``) and ``what`` (for errors)."""

    needs_iface = True
    params = {"rate": 1.0, "both": 0.0}
    what = "gray fault"

    def rules(self, f) -> list[str]:
        raise NotImplementedError

    def check_params(self, f, where):
        check_both(f, where)
        check_rate(f, where)

    def check(self, f, where, cfgs):
        check_frames(f, where, cfgs)

    def prepare(self, inj, f, fid):
        prepare(inj, f, fid)

    def apply(self, inj, f):
        apply(inj, f, self.rules(f), what=self.what)

    def revert(self, rt, d, cfgs):
        revert(rt, d)

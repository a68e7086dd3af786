"""Isolation of a gray link: when the prober (hpnlab.traffic.run.prober) confirms a suspect, the link is taken
out of service, with guards, and put back after a hold time or an explicit repair; every action and
every refusal is logged with its time.

How a link is taken out (``action``): a ToR-agg link by shutting its BGP session on the ToR (``neighbor
IFACE shutdown``: both ends withdraw the routes over it, the link stays up for the prober to see it back
after a put-back), an access link by setting the ToR's port down (no BGP runs there: the host loses
carrier and its other port carries on, as dual-ToR means). ``action: link-down`` sets either link's ToR
end down instead. Both go through the fault injector, so the lab's state.json holds the undo recipe and
``hpnlab down`` or ``hpnlab fail --clear`` undo an isolation a crash left.

Guards (``guard``, pure): never isolate a link whose removal leaves a host NIC without a working ToR port
(single-ToR hosts, or the other port already out) or a ToR without an uplink in service; at most
``max_isolations`` isolations in any ``window_s`` seconds (a prober fooled by a machine too busy to run it
must not take the fabric apart).
"""

from __future__ import annotations

import threading
import time

from hpnlab.errors import SpecError
from hpnlab.traffic import faults as faultmod
from hpnlab.traffic.run.prober import link_end

DEFAULTS = {"action": "auto", "max_isolations": 1, "window_s": 60.0, "hold_s": 30.0}


def _tor_side(cfgs: dict, lk: str) -> tuple[str, str]:
    """(ToR, its interface) of a directed access or ToR-agg link."""
    a, b = lk.split(">")
    tor = a if cfgs[a].role == "tor" else b
    other = b if tor == a else a
    return tor, next(i.name for i in cfgs[tor].interfaces if i.peer == other)


def guard(cfgs: dict, lk: str, out: set[tuple[str, str]], recent: list[float], now: float,
          max_isolations: int, window_s: float) -> str | None:
    """Why ``lk`` must not be isolated now (one line), or None. ``out``: (ToR, iface) ends already out of
    service (isolated or down); ``recent``: the times of earlier isolations."""
    a, b = lk.split(">")
    if a not in cfgs or b not in cfgs or "tor" not in (cfgs[a].role, cfgs[b].role):
        return f"{lk}: only access and ToR-agg links are isolated"
    tor, ifc = _tor_side(cfgs, lk)
    if (tor, ifc) in out:
        return f"{lk}: already out of service"
    n = sum(1 for t in recent if now - t < window_s)
    if n >= max_isolations:
        return f"{lk}: {n} isolation(s) in the last {window_s:g} s already (max_isolations {max_isolations})"
    peer = cfgs[tor].iface(ifc)
    if peer.kind == "access":
        host = peer.peer
        nic = next(n for n in cfgs[host].nics if tor in n.tors)
        left = [(t, cfgs[t].iface(next(i.name for i in cfgs[t].interfaces if i.peer == host)).name)
                for t in nic.tors if t != tor]
        if not [x for x in left if x not in out]:
            return f"{lk}: {host}'s rail {nic.rail} NIC has no other ToR port in service; isolating cuts it off"
    else:
        ups = [i.name for i in cfgs[tor].interfaces if i.kind == "uplink" and i.name != ifc]
        if not [u for u in ups if (tor, u) not in out]:
            return f"{lk}: {tor} has no other uplink in service; isolating cuts its set off"
    return None


class Isolator:
    """Watches a running prober; isolates its confirmed suspects (guarded) and puts them back."""

    def __init__(self, lab, prober, **settings):
        bad = sorted(set(settings) - set(DEFAULTS))
        if bad:
            raise SpecError(f"isolation.{bad[0]}: unknown setting; use {', '.join(DEFAULTS)}")
        self.s = {**DEFAULTS, **settings}
        if self.s["action"] not in ("auto", "bgp-shutdown", "link-down"):
            raise SpecError("isolation.action: give auto, bgp-shutdown or link-down")
        if int(self.s["max_isolations"]) < 1 or self.s["window_s"] <= 0 or self.s["hold_s"] <= 0:
            raise SpecError("isolation: max_isolations >= 1, window_s > 0 and hold_s > 0")
        self.lab, self.prober = lab, prober
        self.log: list[dict] = []
        self.active: dict[tuple[str, str], tuple[faultmod.Fault, float, str]] = {}  # end -> (fault, since, link)
        self._times: list[float] = []
        self._seen = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _log(self, action: str, link: str, node: str, iface: str, why: str = "", begun: float | None = None) -> None:
        self.log.append({"t": round(time.time(), 3), "action": action, "link": link, "node": node, "iface": iface,
                         **({"why": why} if why else {}), **({"begun": round(begun, 3)} if begun else {})})

    def _kind(self, tor: str, ifc: str) -> str:
        if self.s["action"] != "auto":
            return self.s["action"]
        return "link-down" if self.lab.cfgs[tor].iface(ifc).kind == "access" else "bgp-shutdown"

    def isolate(self, lk: str) -> bool:
        with self._lock:
            now = time.time()
            why = guard(self.lab.cfgs, lk, set(self.active), self._times, now, int(self.s["max_isolations"]),
                        self.s["window_s"])
            try:
                tor, ifc = _tor_side(self.lab.cfgs, lk)
            except (KeyError, StopIteration, ValueError):  # not a link with a ToR end: the guard said why
                tor, ifc = "?", "?"
            if why:
                self._log("refused", lk, tor, ifc, why)
                return False
            kind = self._kind(tor, ifc)
            f = faultmod.parse({"kind": kind, "node": tor, "iface": ifc}, "isolation", self.lab.cfgs)
            self.lab.apply_fault(f)
            self.active[(tor, ifc)] = (f, now, lk)
            self._times.append(now)
            self._log(f"isolated ({kind})", lk, tor, ifc, begun=now)  # t: done; begun: before its own events
            return True

    def restore(self, tor: str, ifc: str, why: str) -> None:
        with self._lock:
            got = self.active.pop((tor, ifc), None)
            if got:
                self.lab.revert_fault(got[0])
                self._log("restored", got[2], tor, ifc, why)

    def repaired(self, lk: str) -> None:
        """The link was repaired: put it back now."""
        tor, ifc = _tor_side(self.lab.cfgs, lk)
        self.restore(tor, ifc, "repaired")

    def step(self) -> None:
        for e in self.prober.confirmed()[self._seen:]:
            self._seen += 1
            self.isolate(e["link"])
        now = time.time()
        for (tor, ifc), (_f, since, _lk) in list(self.active.items()):
            if now - since >= self.s["hold_s"]:
                self.restore(tor, ifc, f"hold time {self.s['hold_s']:g} s")

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self.step()

    def __enter__(self) -> "Isolator":
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        for tor, ifc in list(self.active):
            self.restore(tor, ifc, "isolator stopped")

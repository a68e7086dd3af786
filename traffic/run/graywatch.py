"""The black-box prober (and, where asked, isolation) as a service of an experiment's variant: planned and
started once the variant's lab is up, running through every repetition, stopped before the lab goes down.

Why once per variant, not per repetition: planning probes the path map (~11 s on the default lab) and a
new plan between repetitions would judge each repetition on other paths. Each repetition gets its own
record (``prober.json`` in its raw folder): the prober's events and the isolator's log within the
repetition, and the probes and CPU it spent over it (differences of ``Prober.totals``), which
``hpnlab.traffic.analysis.grayfigures`` turns into per-fault figures.

A gray fault's repair puts its link back at once (``Isolator.repaired``): the operator replaced the
optic, so the link need not wait out the hold time; isolations still in force when a repetition ends are
put back before the runner reverts its own faults.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from hpnlab.traffic.analysis.grayfigures import GRAY, fault_link
from hpnlab.traffic.run.isolation import Isolator


class Watch:
    def __init__(self, lab, prober_settings: dict, isolation_settings: dict | None):
        self.lab = lab
        self.prober = lab.prober(**prober_settings)
        self.isolator = Isolator(lab, self.prober, **isolation_settings) if isolation_settings is not None else None
        self._mark: dict = {}

    def start(self) -> dict:
        """Plan and start; returns what results.json keeps of the plan and the settings."""
        t = time.time()
        plan = self.prober.plan()
        plan_s = round(time.time() - t, 1)
        self.prober.start()
        if self.isolator is not None:
            self.isolator.__enter__()
        return {"plan": {**plan, "plan_s": plan_s}, "settings": dict(self.prober.s),
                "isolation": dict(self.isolator.s) if self.isolator is not None else None}

    def stop(self) -> None:
        if self.isolator is not None:
            self.isolator.__exit__(None, None, None)
        self.prober.stop()

    def begin(self) -> None:
        """A repetition starts: its share of the events, the log and the totals begins here."""
        self._mark = {"events": len(self.prober.events),
                      "log": len(self.isolator.log) if self.isolator is not None else 0,
                      "totals": self.prober.totals()}

    def repaired(self, fault) -> None:
        """The runner reverted a fault: a gray fault's link, if isolated, goes back into service now."""
        if self.isolator is None or fault.kind not in GRAY:
            return
        lk = fault_link(self.lab.cfgs, fault.node, fault.iface)
        if lk and any(x[2] == lk for x in self.isolator.active.values()):
            self.isolator.repaired(lk)

    def end(self, run_dir: Path) -> dict:
        """A repetition ends: isolations still in force are put back, and its record is written."""
        if self.isolator is not None:
            for tor, ifc in list(self.isolator.active):
                self.isolator.restore(tor, ifc, "repetition ended")
        if not self._mark:
            return {}
        a, b = self._mark["totals"], self.prober.totals()
        span = max(1e-9, b["t"] - a["t"])
        rec = {"events": self.prober.events[self._mark["events"]:],
               "isolation": self.isolator.log[self._mark["log"]:] if self.isolator is not None else None,
               "report": {"paths": len(self.prober.rows), "rate_per_path": self.prober.s["rate"],
                          "span_s": round(span, 2), "probes_per_s": round((b["sent"] - a["sent"]) / span, 1),
                          "probe_bytes_per_s": round((b["sent"] - a["sent"]) * 64 / span),
                          "node_cpu_s_per_s": round((b["node_cpu_s"] - a["node_cpu_s"]) / span, 4),
                          "judge_cpu_s_per_s": round((b["judge_cpu_s"] - a["judge_cpu_s"]) / span, 4)}}
        self._mark = {}
        (run_dir / "prober.json").write_text(json.dumps(rec))
        return rec


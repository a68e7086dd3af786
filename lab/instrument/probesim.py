"""The prober's judging on simulated counts: which link it confirms first after a loss starts, and when.

The prober (hpnlab.traffic.run.prober) judges every ``step_s`` the last ``window_s`` of every path's counts.
Here the counts are drawn: each bucket of ``bucket_s`` a path sends ``rate * bucket_s`` probes, and each
is lost with probability ``loss`` when the path crosses the faulty link (none otherwise). The window
starts fault-free, the fault starts with the next bucket, and a judgement follows each bucket with the
prober's own rules (tomography.suspects, tomography.named, ``confirm`` in a row). Root-free: the rules
for choosing paths and naming links are compared here on a lab's real path map (bench/prober_rules.py)
and in the unit tests.
"""

from __future__ import annotations

import random
import statistics

from hpnlab.instrument import probeplan, tomography


def first_confirmed(chosen: list[dict], victim: str, rng: random.Random, settings: dict, loss: float = 0.01,
                    horizon_s: float = 20.0) -> tuple[str | None, float | None]:
    """(the first link confirmed, seconds after the fault's start) within ``horizon_s``, or (None, None).
    ``settings``: the prober's (rate, window_s, bucket_s, min_lost, min_loss, background, min_confidence,
    min_margin, confirm)."""
    per = int(round(settings["rate"] * settings["bucket_s"]))
    nb = max(1, round(settings["window_s"] / settings["bucket_s"]))
    links = [probeplan.links_of(r) for r in chosen]
    hist = [[0] * len(links) for _ in range(nb)]
    streak: tuple[str | None, int] = (None, 0)
    for k in range(1, int(horizon_s / settings["bucket_s"]) + 1):
        hist = hist[1:] + [[sum(rng.random() < loss for _ in range(per)) if victim in ls else 0 for ls in links]]
        stats = [tomography.PathStat(ls, per * nb, sum(h[i] for h in hist)) for i, ls in enumerate(links)]
        sus = tomography.suspects(stats, int(settings["min_lost"]), settings["min_loss"], settings["background"])
        top = tomography.named(sus, settings["min_confidence"], settings["min_margin"])
        streak = tomography.advance(streak, top)
        if top and streak[1] >= int(settings["confirm"]):
            return top["link"], round(k * settings["bucket_s"], 3)
    return None, None


def sweep(chosen: list[dict], victims: list[str], trials: int, settings: dict, seed: int = 0,
          loss: float = 0.01, horizon_s: float = 20.0) -> dict:
    """Every victim ``trials`` times: {"faults", "right", "wrong", "unconfirmed", "wrong_share",
    "confirm_s": {min, median, p90, p99, max} of the right confirmations, "wrong_pairs": {victim: {named: n}}}.
    Trial t of every victim draws from Random(seed * 1_000_003 + t): each rule set meets the same draws."""
    right, wrong, none, times = 0, 0, 0, []
    pairs: dict[str, dict[str, int]] = {}
    for v in victims:
        for t in range(trials):
            got, s = first_confirmed(chosen, v, random.Random(seed * 1_000_003 + t), settings, loss, horizon_s)
            if got is None:
                none += 1
            elif got == v:
                right += 1
                times.append(s)
            else:
                wrong += 1
                pairs.setdefault(v, {}).setdefault(got, 0)
                pairs[v][got] += 1
    times.sort()
    q = (lambda f: times[min(len(times) - 1, int(f * len(times)))]) if times else (lambda f: None)
    faults = len(victims) * trials
    return {"faults": faults, "right": right, "wrong": wrong, "unconfirmed": none,
            "wrong_share": round(wrong / faults, 5) if faults else 0.0,
            "confirm_s": {"min": times[0] if times else None,
                          "median": statistics.median(times) if times else None,
                          "p90": q(0.9), "p99": q(0.99), "max": times[-1] if times else None},
            "wrong_pairs": pairs}

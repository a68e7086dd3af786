"""Does a dilated reading read back true? The error model of time dilation, fitted per detector.

A lab dilated by k runs every protocol timer k times slower and the rest (the kernel's forwarding and
carrier, the daemons' and agents' work, the links) at 1:1. A figure measured in it, G(k), is then the
timer's share T taken k times plus the undilated work W once: G(k) = k T + W, and its reading in the
fabric's time, R(k) = G(k) / k = T + W / k, is exact for the timer's share and k times too small for
the work. At k = 1, R = T + W, the fabric's figure. ``fit`` finds T and W by least squares over every
repetition at every k (R against 1 / k) and gives the residual, what the model leaves unexplained;
``analyse`` does it for each detector of an experiment like experiments/time-dilation.yml (variants of
one fault at several k; each fault's detector is in its results.json entry, hpnlab.model.dilation) and says,
per k, how far the reading is from the 1:1 one. Pure.
"""

from __future__ import annotations

import math
import statistics

FIGURES = ("converged_gap_ms", "routes_last_ms")


def fit(points: list[tuple[int, float]]) -> dict | None:
    """Least squares of R = T + W / k over (k, R) points; None with fewer than two values of k."""
    if len({k for k, _ in points}) < 2:
        return None
    xs, ys = [1.0 / k for k, _ in points], [r for _, r in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    w = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    t = my - w * mx
    res = [y - (t + w * x) for x, y in zip(xs, ys)]
    return {"timer_share_ms": round(t, 2) + 0.0, "undilated_ms": round(w, 2) + 0.0, "n": len(points),  # no -0
            "residual_rms_ms": round(math.sqrt(statistics.fmean([r * r for r in res])), 2),
            "residual_max_ms": round(max(abs(r) for r in res), 2)}


def detector_of(name: str, v: dict) -> str:
    """A variant's detector: its first fault's (hpnlab.model.dilation), else its name before '-x<k>'."""
    faults = v.get("faults") or []
    det = (faults[0].get("dilation") or {}).get("detector") if faults else None
    return det or name.rsplit("-x", 1)[0]


def readings(results: dict, figure: str) -> dict[str, dict[int, list[float]]]:
    """detector -> k -> each repetition's reading of ``figure`` in the fabric's time (ms, / k)."""
    out: dict[str, dict[int, list[float]]] = {}
    for name, v in results["variants"].items():
        k = int(v.get("time_dilation") or 1)
        vals = [r["faults"][0].get(figure) for r in v.get("runs", []) if r.get("faults")]
        vals = [x / k for x in vals if isinstance(x, (int, float))]
        if vals:
            out.setdefault(detector_of(name, v), {}).setdefault(k, []).extend(vals)
    return out


def flagged(results: dict) -> dict[str, dict[int, int]]:
    """detector -> k -> repetitions flagged by the lateness meter or the slip guard."""
    out: dict[str, dict[int, int]] = {}
    for name, v in results["variants"].items():
        k = int(v.get("time_dilation") or 1)
        n = sum(1 for r in v.get("runs", []) if (r.get("slip") or {}).get("flagged")
                or any((f.get("emulator") or {}).get("flagged") for f in r.get("faults", [])))
        out.setdefault(detector_of(name, v), {})[k] = out.get(detector_of(name, v), {}).get(k, 0) + n
    return out


def analyse(results: dict, figures: tuple[str, ...] = FIGURES) -> dict:
    """Per figure and detector: per k the median reading, the model's, its error against the 1:1 median,
    the runs flagged; and the fit."""
    flags = flagged(results)
    out: dict = {}
    for figure in figures:
        per: dict = {}
        for det, by_k in sorted(readings(results, figure).items()):
            model = fit([(k, r) for k, rs in by_k.items() for r in rs])
            one = statistics.median(by_k[1]) if 1 in by_k else None
            rows = {}
            for k in sorted(by_k):
                med = statistics.median(by_k[k])
                pred = model["timer_share_ms"] + model["undilated_ms"] / k if model else None
                rows[str(k)] = {"n": len(by_k[k]), "median_ms": round(med, 2), "min_ms": round(min(by_k[k]), 2),
                                "max_ms": round(max(by_k[k]), 2),
                                "model_ms": round(pred, 2) if pred is not None else None,
                                "error_vs_1to1_ms": round(med - one, 2) if one is not None else None,
                                "error_vs_1to1_pct": round(100 * (med - one) / one, 1) if one else None,
                                "flagged": flags.get(det, {}).get(k, 0)}
            per[det] = {"by_k": rows, "fit": model}
        out[figure] = per
    return out


def table(analysis: dict, figure: str = "converged_gap_ms") -> list[str]:
    """One line per detector: the reading at each k beside 1:1, and the fit with its residual."""
    lines = [f"{figure} read back in the fabric's time (/ k), median over the repetitions; error against 1:1"]
    for det, d in analysis.get(figure, {}).items():
        cells = [f"k={k} {r['median_ms']:g} ms" + (f" ({r['error_vs_1to1_ms']:+g})" if k != "1" and
                                                 r["error_vs_1to1_ms"] is not None else "")
                 + (f" [{r['flagged']} flagged]" if r["flagged"] else "") for k, r in d["by_k"].items()]
        f = d["fit"]
        model = (f"; fit: timer share {f['timer_share_ms']:g} ms + undilated {f['undilated_ms']:g} ms / k, "
                 f"residual rms {f['residual_rms_ms']:g} ms (max {f['residual_max_ms']:g}, n {f['n']})") if f else ""
        lines.append(f"{det}: " + ", ".join(cells) + model)
    return lines

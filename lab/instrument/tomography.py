"""Per-link loss from per-path loss (network tomography), and the suspect link with a confidence.

Input: for each probed path, the directed links it crosses and how many probes it sent and lost in a
window. A path's loss is at least the loss of each of its links, so the loss of a link is at most the
lowest loss of the paths through it: a link on one clean path is cleared, however lossy its other paths
(they owe their loss to another link). This is the bound NetBouncer's and 007's analyses start from;
with every link on >= 2 paths (hpnlab.instrument.probeplan) a single lossy link is the only one whose every path
loses.

A suspect's confidence, 0..1, is the product of two shares (``suspects`` says which links qualify):

- explained: the share of the window's lost probes that went through it (1.0 when it alone explains the
  losses; two lossy links split it);
- significance: 1 - the chance that its paths would lose that many probes from background loss alone
  (``background``: the fault-free lab's own loss rate per probe, a binomial tail).

Each suspect also carries its ``margin``: how much better it explains the window than the runner-up (the
log of their likelihood ratio). A caller names a link only when both are high (``named``): confidence
says the loss is real and lies on it; margin says no other single link explains it about as well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class PathStat:
    links: list[str]
    sent: int
    lost: int

    @property
    def loss(self) -> float:
        return self.lost / self.sent if self.sent else 0.0


def binom_tail(n: int, p: float, k: int) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed in log space (n up to a few 10^5 probes)."""
    if k <= 0:
        return 1.0
    if p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    total = 0.0
    for i in range(k, n + 1):
        term = math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq)
        total += term
        if term < total * 1e-12 and i > n * p:
            break
    return min(1.0, total)


def link_bounds(paths: list[PathStat]) -> dict[str, dict]:
    """link -> {"loss": the lowest loss of its paths (the upper bound on its own), "paths", "sent", "lost"
    (summed over its paths)}: every link's estimate, for the health table."""
    out: dict[str, dict] = {}
    for p in paths:
        if not p.sent:
            continue
        for lk in set(p.links):
            d = out.setdefault(lk, {"loss": 1.0, "paths": 0, "sent": 0, "lost": 0})
            d["loss"] = min(d["loss"], round(p.loss, 5))
            d["paths"] += 1
            d["sent"] += p.sent
            d["lost"] += p.lost
    return out


def logpmf(n: int, p: float, k: int) -> float:
    """log P(X = k) for X ~ Binomial(n, p), p kept off 0 and 1."""
    p = min(max(p, 1e-12), 1 - 1e-12)
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p)
            + (n - k) * math.log1p(-p))


def binom_cdf(n: int, p: float, k: int) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    return 1.0 - binom_tail(n, p, k + 1)


def suspects(paths: list[PathStat], min_lost: int = 3, min_loss: float = 0.0005, background: float = 1e-4,
             min_paths: int = 2, alpha: float = 1e-3) -> list[dict]:
    """The suspect links, most confident first: [{"link", "loss", "confidence", "explained",
    "significance", "paths", "lost"}]. A link on fewer than ``min_paths`` paths is never named (one path
    cannot tell its links apart).

    A link is a candidate when its paths lost at least ``min_lost`` probes together, at a rate (its
    estimate: lost / sent over its paths) of at least ``min_loss``, and none of its paths clears it: a
    path clears a link when it lost so few probes that a link losing at the estimate would have lost more
    with probability 1 - ``alpha`` (a binomial test). Requiring every path to lose a few probes instead
    favours the links with the fewest paths: at low loss rates a link with two paths, both through the
    faulty link, meets it more often than the faulty link with five (measured: 0.1 % on a ToR-agg link
    named an access link behind it).

    Greedy, as a set cover: the most likely candidate (the window's paths binomial at its estimate through
    it and at the background elsewhere) is named, the paths through it count as explained, and the rest
    are judged again without them. So a link whose every
    probed path also crosses a named suspect is not named beside it; two lossy links are both named."""
    total_lost = sum(p.lost for p in paths)
    left = [p for p in paths if p.sent]
    out: list[dict] = []
    while True:
        best, second = None, None
        for lk in sorted({lk for p in left for lk in p.links}):
            through = [p for p in left if lk in p.links]
            sent, lost = sum(p.sent for p in through), sum(p.lost for p in through)
            if len(through) < min_paths or lost < min_lost or lost / sent < min_loss:
                continue
            est = lost / sent
            if any(binom_cdf(p.sent, est, p.lost) < alpha for p in through):
                continue  # a path too clean for the link to lose at its estimate
            significance = 1.0 - binom_tail(sent, background, lost)
            explained = lost / total_lost if total_lost else 0.0
            cand = {"link": lk, "loss": round(est, 5), "confidence": round(explained * significance, 4),
                    "explained": round(explained, 4), "significance": round(significance, 6),
                    "paths": len(through), "lost": lost}
            # the most likely explanation: the window's every path, those through it losing at its estimate
            # and the others at the background rate (a link whose paths include clean ones, or that leaves
            # lossy paths unexplained, scores lower); ranking by the share explained alone, then the
            # estimate, named an access link behind the faulty uplink in 2 of 3 lab runs
            ll = sum(logpmf(p.sent, est, p.lost) for p in through) + \
                sum(logpmf(p.sent, background, p.lost) for p in left if lk not in p.links)
            if best is None or ll > best["_ll"]:
                best, second = {**cand, "_ll": ll}, (best["_ll"] if best else None)
            elif second is None or ll > second:
                second = ll
        if best is None:
            return out
        # how much better it explains the window than the runner-up (a log likelihood ratio; inf: no other
        # candidate): a link whose paths all cross another is told from it only by the other's remaining paths
        best["margin"] = round(best["_ll"] - second, 3) if second is not None else math.inf
        del best["_ll"]
        out.append(best)
        left = [p for p in left if best["link"] not in p.links]


def named(sus: list[dict], min_confidence: float = 0.9, min_margin: float = 4.6) -> dict | None:
    """The window's top suspect if it names a link: confidence >= ``min_confidence`` and margin >=
    ``min_margin`` (4.6: it explains the window at least 100 times likelier than the runner-up), else None.
    Why the margin: a link whose every path also crosses the lossy one is told from it only by the
    lossy one's other paths; in a window where those lost nothing (1 % loss, a few hundred probes each,
    the first windows of a fault) the inner link explains the loss nearly as well, ranks first about as
    often, and was confirmed by a CI run in place of the faulty uplink."""
    top = sus[0] if sus else None
    if top is None or top["confidence"] < min_confidence or top.get("margin", math.inf) < min_margin:
        return None
    return top


def advance(streak: tuple[str | None, int], top: dict | None) -> tuple[str | None, int]:
    """The confirmation rule's state after one judgement: (the named link, how many judgements in a row have
    named it); ``top`` is that judgement's ``named`` result. The prober confirms a link when the count reaches
    its ``confirm``; hpnlab.instrument.probesim applies the same rule to simulated windows."""
    if top is None:
        return None, 0
    return top["link"], streak[1] + 1 if top["link"] == streak[0] else 1

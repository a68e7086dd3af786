"""allreduce: a ring all-reduce over every host (or workload.hosts), the training of the paper's Fig. 18:
2(n-1) synchronised steps per iteration, on one connection per peer or on the least-loaded of several.
With ``timeout_s`` it is a job that dies, as one on NCCL or gloo does: a rank whose all-reduce has not
completed that long after it began aborts, and from the first abort on the job is dead (its figures after
that say "dead", not "not back yet")."""

import json
import random
import sys
from typing import Literal

from pydantic import Field

from hpnlab.errors import SpecError
from hpnlab.traffic.analysis import rings
from hpnlab.traffic.analysis.measure import summarise
from hpnlab.traffic.workloads.base import (WorkloadKind, WorkloadParams, check_hosts, congestion_of, dscp_args, recovered_at,
                                            register)


class AllReduceParams(WorkloadParams):
    hosts: list[str] | None = Field(None, description="the ring's order (default: every host)")
    size_kb: int = Field(1024, ge=1, le=1 << 20, description="bytes each iteration reduces, KB")
    connections: int = Field(4, ge=1, le=64, description="connections per peer")
    select: Literal["one", "least-loaded"] = Field("least-loaded", description=(
        "one connection per peer, or each segment on the least-loaded of several (HPN App. B)"))
    timeout_s: float | None = Field(None, gt=0, le=3600, description=(
        "collective timeout: a rank whose all-reduce (one iteration) has not completed this many seconds after "
        "it began aborts and the job is dead, as with NCCL's or gloo's timeout (default: none, it waits)"))
    order: Literal["listed", "topology", "interleaved", "random"] = Field("listed", description=(
        "the ring's order: listed (hosts as given, else by name), topology (each ToR set's hosts together: "
        "one ring edge per set crosses the agg tier), interleaved (neighbours in different sets), random "
        "(shuffled with seed)"))
    seed: int = Field(1, ge=0, description="the shuffle's seed of order random (the same ring every repetition)")
    rails: list[int] | None = Field(None, min_length=1, description=(
        "concurrent rings, one per listed rail, each reducing size_kb / len(rails) (the paper's Multi-AllReduce); "
        "an iteration ends when every rail's ring has done it (default: one ring on workload.rail)"))
    placement: Literal["hash", "disjoint"] = Field("disjoint", description=(
        "each connection's source port: disjoint (from a path map probed once per variant, spread over the "
        "host's ports (planes) first, then over the aggs: HPN's host-side path selection, App. B) or hash (the "
        "kernel's choice, so the hash alone places it: now and then all of a peer's connections share one "
        "plane, and a fault on it halts the ring for the whole fault)"))
    fabric_bytes: bool = Field(False, description=(
        "sample every ToR's uplinks (hpnlab.node.linkstats, every 0.5 s) and report the bytes that crossed the "
        "agg tier per iteration against the ring's 2(n-1)/n x size per crossing edge"))


@register
class AllReduce(WorkloadKind):
    kind = "allreduce"
    help = "a ring all-reduce; iterations/s is the training throughput"
    series_label = "all-reduce iterations"
    Params = AllReduceParams
    marks = True

    def check(self, w, spec, cfgs, where):
        check_hosts(f"{where} workload.hosts", list(w.hosts or []), cfgs, w.rail)
        for r in w.rails or []:
            check_hosts(f"{where} workload.rails", list(w.hosts or []), cfgs, r)
            if r >= spec.rails:
                raise SpecError(f"{where} workload.rails: rail {r} is not a rail of this lab (rails 0..{spec.rails - 1})")
        if w.rails and len(set(w.rails)) != len(w.rails):
            raise SpecError(f"{where} workload.rails: a rail is listed twice ({w.rails})")

    def rings(self, plan) -> dict[int, list[str]]:
        """rail -> its ring's hosts in rank order (one ring unless workload.rails lists several)."""
        w = plan.workload
        out = {}
        for rail in w.rails or [w.rail]:
            hosts = plan.ring()
            out[rail] = rings.order_ring(hosts, {h: plan.cfgs[h].nic(rail).subnet for h in hosts}, w.order, w.seed)
        return out

    def prepare_variant(self, lab, plan, raw, progress):
        """placement disjoint: probe each ring edge's source ports once (the lab does not change between
        repetitions) and keep, per rank, the ports its connections bind."""
        w = plan.workload
        if w.placement != "disjoint":
            return {}
        from concurrent.futures import ThreadPoolExecutor

        from hpnlab.traffic.run import balance
        from hpnlab.traffic.run.nodetools import path_map

        pool = max(16, 4 * w.connections)
        sports = list(range(PLACED_SPORT, PLACED_SPORT + pool))
        edges = [(k, rail, ring[i], ring[(i + 1) % len(ring)]) for k, (rail, ring) in enumerate(self.rings(plan).items())
                 for i in range(len(ring))]
        progress(f"{plan.name}: probing {pool} source ports on each of {len(edges)} ring edges (placement disjoint)")

        def one(e):
            k, rail, src, dst = e
            return e, path_map(lab.runtime, lab.cfgs, src, [dst], rail, sports, self.port(w, k), "tcp")

        with ThreadPoolExecutor(max_workers=4) as ex:
            probed = list(ex.map(one, edges))
        plan.sports = {}
        placed = {}
        for (k, rail, src, dst), rows in probed:
            try:
                picked = balance.spread(rows, w.connections, random.Random(1))
            except ValueError as e:
                raise SpecError(f"{plan.name} workload.placement: {e}") from None
            plan.sports[(rail, src)] = [r["sport"] for r in picked]
            placed.setdefault(str(rail), {})[src] = [{"sport": r["sport"], "port": r["port"], "agg": r["agg"]} for r in picked]
        raw.mkdir(parents=True, exist_ok=True)
        (raw / "pathmap.json").write_text(json.dumps([r for _e, rows in probed for r in rows]))
        return {"placement": placed}

    @staticmethod
    def port(w, k: int) -> int:
        """The port ring k listens on."""
        return RAIL_PORT + 10 * k if w.rails is not None else RING_PORT

    def launch(self, plan, run_dir, t0, duration):
        w = plan.workload
        multi = w.rails is not None
        size = w.size_kb * 1024 // (len(w.rails) if multi else 1)
        procs = []
        for k, (rail, ring) in enumerate(self.rings(plan).items()):
            addrs = ",".join(plan.host_ip(h, rail) for h in ring)
            for rank, h in enumerate(ring):
                # one ring: the files and ports as before; several: each rail's own files and port
                out = str(run_dir / (f"allreduce-r{rail}-{rank}.json" if multi else f"allreduce-{rank}.json"))
                procs.append({"role": "allreduce", "node": h, "out": out,
                              "argv": [sys.executable, "-m", "hpnlab.node.programs.allreduce", "--rank", str(rank), "--addrs", addrs,
                                       "--size", str(size), "--conns", str(w.connections),
                                       "--select", w.select, "--duration", f"{duration:g}", "--start-at", f"{t0:.3f}",
                                       "--congestion", w.congestion, "--out", out]
                              + (["--port", str(RAIL_PORT + 10 * k)] if multi else [])
                              + (["--sports", ",".join(map(str, plan.sports[(rail, h)]))]
                                 if (rail, h) in plan.sports else [])
                              + (["--timeout", f"{w.timeout_s:g}"] if w.timeout_s is not None else []) + dscp_args(w)})
        if w.fabric_bytes:
            for n, c in sorted(plan.cfgs.items()):
                if c.role == "tor":
                    out = str(run_dir / f"linkstats-{n}.json")
                    procs.append({"role": "linkstats", "node": n, "out": out,
                                  "argv": [sys.executable, "-m", "hpnlab.node.linkstats", "--ifaces", ",".join(uplinks_of(c)),
                                           "--interval", "0.5", "--duration", f"{duration:g}", "--start-at",
                                           f"{t0:.3f}", "--out", out]})
        return procs

    def after_repetition(self, lab, plan, run_dir):
        """Per-flow multipath: every ring connection's 5-tuple re-probed, and the ToRs' FARE weights
        (hpnlab.traffic.run.pathcheck)."""
        from hpnlab.traffic.run import pathcheck

        if not pathcheck.wanted(plan):
            return
        w = plan.workload
        addr = {plan.host_ip(h, r): (h, r) for r in (w.rails or [w.rail]) for h in plan.cfgs
                if plan.cfgs[h].role == "host" and plan.cfgs[h].nic(r)}
        conns = []
        for p in sorted(run_dir.glob("allreduce-*.json")):
            rep = json.loads(p.read_text())
            src, rail = addr.get(rep.get("addr"), (None, None))
            dst = addr.get(rep.get("next"), (None, None))[0]
            if src is not None and dst is not None:
                conns += [{"src": src, "dst": dst, "sport": sp, "dport": self.port(w, rail), "rail": rail,
                           "connection": i} for i, sp in enumerate(rep.get("local_ports") or [])]
        if conns:
            pathcheck.record(lab, plan, run_dir, conns)

    def result(self, plan, run_dir):
        reps = [json.loads(p.read_text()) for p in sorted(run_dir.glob("allreduce-*.json"))]
        if not reps:
            return None
        w = plan.workload
        r0 = min(reps, key=lambda r: r["rank"])
        iterations = r0["iterations"]
        per_rail = {w.rail: iterations}
        if w.rails is not None:
            # Multi-AllReduce: iteration k is done when every rail's ring has done it. The rings do not wait for
            # each other (no compute between iterations joins them), so a faster rail runs ahead.
            per_rail = {r: json.loads((run_dir / f"allreduce-r{r}-0.json").read_text())["iterations"]
                        for r in w.rails if (run_dir / f"allreduce-r{r}-0.json").exists()}
            iterations = [max(ts) for ts in zip(*per_rail.values())] if per_rail else []
        out = {"kind": "allreduce", "select": w.select, "connections": r0["connections"],
               "ranks": r0["ranks"], "bytes_per_iteration": r0["bytes_per_iteration"] * len(w.rails or [0]),
               "iterations": iterations, "resent_segments": sum(r["resent_segments"] for r in reps),
               "duplicate_segments": sum(r["duplicate_segments"] for r in reps), "congestion": congestion_of(reps),
               "timeout_s": w.timeout_s, "placement": w.placement, "size_bytes": w.size_kb * 1024, **deaths(reps)}
        if w.order != "listed" or w.rails is not None:
            out["rings"] = {str(rail): ring for rail, ring in self.rings(plan).items()}
        if w.order != "listed" or w.rails is not None or w.fabric_bytes:
            # first to last iteration, not the baseline's rate (kept to 0.01 it/s: 0.7 % at 1.5 it/s)
            out["iteration_ms"] = round(1000 * (iterations[-1] - iterations[0]) / (len(iterations) - 1), 1) \
                if len(iterations) > 1 else None
        if w.fabric_bytes:
            out["fabric"] = fabric(plan, run_dir, self.rings(plan), per_rail,
                                   w.size_kb * 1024 // (len(w.rails) if w.rails else 1))
        from hpnlab.traffic.run import pathcheck

        check = pathcheck.read(run_dir)
        if check is not None:
            out["pathcheck"] = check
        return out

    def rate_series(self, w, t0, bin_s=0.25):
        its = w["iterations"]
        if not its:
            return []
        n = int((max(its) - t0) / bin_s) + 1
        counts = [0] * max(n, 1)
        for t in its:
            k = int((t - t0) / bin_s)
            if 0 <= k < len(counts):
                counts[k] += 1
        return [(round((k + 0.5) * bin_s, 3), c / bin_s) for k, c in enumerate(counts)]

    def window(self, w, t0, base_end, start, end):
        """Iterations/s during the fault against before it, and the longest halt between iterations (until
        the job died, if it died in the window: ``died_ms`` after the fault's start)."""
        its = w["iterations"]
        base = [t for t in its if t0 + 0.5 <= t < base_end]
        base_rate = len(base) / max(1e-9, base_end - t0 - 0.5)
        during = [t for t in its if start <= t < end]
        rate = len(during) / max(1e-9, end - start)
        died = dead_at(w)
        marks = [start] + during + [min(end, died) if died is not None and died >= start else end]
        halt = max(b - a for a, b in zip(marks, marks[1:]))
        out = {"baseline_rate": round(base_rate, 2), "rate_during": round(rate, 2),
               "throughput_pct": round(100 * rate / base_rate, 1) if base_rate else None,
               "longest_halt_ms": round(halt * 1000, 1)}
        if died is not None and start <= died < end:
            out["died_ms"] = round((died - start) * 1000, 1)
        return out

    def recovery(self, w, t0, base_end, repair, window_end):
        """Iterations after the repair: when the ring ran at 90 % of its pre-fault rate again. A job that
        died before it was back (before the repair, or after it but still short of its rate) is ``dead``,
        not slow: no recovery_ms and no halt after the repair, since nothing was left to come back."""
        its = w["iterations"]
        base = [t for t in its if t0 + 0.5 <= t < base_end]
        out = recovered_at(its, len(base) / max(1e-9, base_end - t0 - 0.5), repair, window_end)
        died = dead_at(w)
        if died is None or died >= window_end:
            return out
        if out.get("recovered") and died >= repair + out["recovery_ms"] / 1000:
            return out  # back first, dead later: a later fault's doing, not this one's
        return {"dead": True, "recovered": False, "recovery_ms": None, "halt_after_repair_ms": None,
                "died_after_repair_ms": round((died - repair) * 1000, 1)}


    def aggregate(self, runs):
        """The set-up every variant states (connections, select, placement, bytes), and the ring order and
        fabric bytes over the repetitions where the run asked for them (order, rails or fabric_bytes)."""
        from hpnlab.traffic.run import pathcheck

        checked = pathcheck.aggregate(runs)
        ws = [r.get("workload") or {} for r in runs]
        # what was held equal, or not, between variants: every variant states it (summary_lines prints it)
        setup = {k: _same([w.get(k) for w in ws]) for k in SETUP_KEYS}
        if not any("fabric" in w or "rings" in w for w in ws):
            return {**({"allreduce": setup} if setup["connections"] is not None else {}), **checked}
        fab = [w.get("fabric") or {} for w in ws]
        return {**checked, "allreduce": {
            **setup,
            # ms per iteration, first to last iteration of each run
            "iteration_ms": summarise([w.get("iteration_ms") for w in ws]),
            "rings": next((w["rings"] for w in ws if w.get("rings")), None),
            "crossing_edges": next((f["crossing_edges"] for f in fab if f.get("crossing_edges")), None),
            **{k: summarise([f.get(k) for f in fab]) for k in ("measured_bytes", "expected_bytes", "measured_pct")}}}

    def summary_lines(self, vname, v):
        a = v.get("allreduce")
        if not a:
            return []
        med = lambda st, f="{:g}": "-" if not st or st.get("median") is None else (  # noqa: E731
            f"{f.format(st['median'])} [{f.format(st['min'])}-{f.format(st['max'])}]")
        setup = "" if a.get("connections") is None else (
            f"; {a['connections']} connection(s) per peer, select {a.get('select')}, placement {a.get('placement')}, "
            f"{a.get('size_bytes')} B reduced ({a.get('bytes_per_iteration')} B sent per rank) per iteration")
        if "iteration_ms" not in a:
            return [f"{vname}: all-reduce{setup}"] if setup else []
        out = [f"{vname}: all-reduce {med(a['iteration_ms'])} ms per iteration; rings {a.get('rings')}{setup}"]
        if a["expected_bytes"]["n"]:
            mb = "{:.2f}"
            m = {k: {x: (y / 1e6 if isinstance(y, (int, float)) and x != "n" else y) for x, y in a[k].items()}
                 for k in ("measured_bytes", "expected_bytes")}
            out.append(f"  into the agg tier per iteration: {med(m['measured_bytes'], mb)} MB measured on the ToRs' "
                       f"uplinks, {med(m['expected_bytes'], mb)} MB of ring payload ({a['crossing_edges']} crossing "
                       f"edges x 2(n-1)/n x size), measured {med(a['measured_pct'])} % of it")
        return out


# A variant's set-up as its runs report it: connections per peer, how segments pick a connection, how the
# connections' source ports are placed, the bytes reduced per iteration and each rank's bytes sent per iteration.
SETUP_KEYS = ("connections", "select", "placement", "size_bytes", "bytes_per_iteration")


def _same(values: list):
    """The one value every run reported (None where none did); the distinct values, sorted, where they differ."""
    got = {json.dumps(v, sort_keys=True) for v in values if v is not None}
    if len(got) > 1:
        return sorted(json.loads(v) for v in got)
    return json.loads(got.pop()) if got else None


RING_PORT = 17000  # one ring: the node program's default port
PLACED_SPORT = 27000  # placement disjoint: the probed source ports begin here (below the ephemeral range, 32768 on)
RAIL_PORT = 17100  # concurrent rings: rail k's ring listens on RAIL_PORT + 10 k (one ring: the node's default)


def uplinks_of(cfg) -> list[str]:
    return [i.name for i in cfg.interfaces if i.kind == "uplink"]


def fabric(plan, run_dir, rings_: dict[int, list[str]], per_rail: dict[int, list[float]], size: int) -> dict:
    """Bytes the ToRs sent into the agg tier per iteration (their uplinks' counters, from 1 s after a ring's
    first iteration to its last) against the rings' 2(n-1)/n x size per crossing edge (hpnlab.traffic.analysis.rings).
    Per rail (a rail's ring crosses only that rail's ToRs, and rings of different rails do not keep step),
    then summed: the bytes of one iteration of every ring."""
    stats = {}
    for p in run_dir.glob("linkstats-*.json"):
        try:
            stats[p.stem.removeprefix("linkstats-")] = json.loads(p.read_text())
        except ValueError:
            continue
    out = {"crossing_edges": {}, "expected_bytes": 0, "measured_bytes": 0, "iterations": {}}
    for rail, ring in rings_.items():
        sets = {h: plan.cfgs[h].nic(rail).subnet for h in ring}
        ups = {n: uplinks_of(c) for n, c in plan.cfgs.items() if c.role == "tor" and c.rail == rail}
        its = per_rail.get(rail) or []
        expected = rings.expected_bytes(ring, sets, size)
        out["crossing_edges"][str(rail)] = rings.crossing_edges(ring, sets)
        out["expected_bytes"] += expected
        got = rings.per_iteration(stats, ups, its, its[0] + 1.0, its[-1], expected) if len(its) >= 3 else {}
        out["iterations"][str(rail)] = got.get("iterations", len(its))
        if out["measured_bytes"] is not None and got.get("measured_bytes") is not None:
            out["measured_bytes"] += got["measured_bytes"]
        else:
            out["measured_bytes"] = None
    m, e = out["measured_bytes"], out["expected_bytes"]
    out["measured_pct"] = round(100 * m / e, 1) if m is not None and e else None
    return out


def deaths(reps: list[dict]) -> dict:
    """The ranks that aborted on the collective timeout (``deaths``, in order) and the job's death: the first
    abort (``died``: its rank, wall-clock time and how long its all-reduce had blocked). A job whose rank
    aborted is dead from then on, whatever the other ranks did: the library tears the job down."""
    out = sorted(({"rank": r["rank"], **r["aborted"]} for r in reps if r.get("aborted")), key=lambda d: d["at"])
    return {"deaths": out, "died": out[0] if out else None}


def dead_at(w: dict) -> float | None:
    """When the job died (wall clock), or None: it ran to the end."""
    return (w.get("died") or {}).get("at")

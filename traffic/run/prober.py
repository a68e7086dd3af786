"""The black-box prober: a lab service that probes the fabric continuously along paths chosen from the
path map, infers per-link loss from per-path loss and names a suspect link with a confidence.

- plan: one round of TTL probes per host NIC (hpnlab.node.programs.craft paths, the kernel's own hash) to every
  other host NIC the aggs lead to and to the aggs' loopbacks, and each agg's own route to every host
  NIC below it (paths that end or start at a switch split an uplink from the downlink every host-to-host
  path of its rail shares); hpnlab.instrument.probeplan chooses the paths so every directed access and fabric link
  lies on >= ``cover`` of them, and every two links sharing a path are told apart by >= ``apart`` paths;
- probe: one node program per host and per agg (hpnlab.node.programs.prober) sends its paths' probes at ``rate``
  per path and counts what it receives, in JSON lines;
- judge: every ``step_s`` the last ``window_s`` seconds of every path (once ``grace_s`` old: every probe of
  them has arrived or is lost) go through hpnlab.instrument.tomography; a link named the top suspect with at least
  ``min_confidence`` and a margin of at least ``min_margin`` over the runner-up (hpnlab.instrument.tomography.named)
  in ``confirm`` judgements in a row is confirmed (an event in the log, with time).

Its cost is reported (``report()``): probes per second, the node programs' CPU seconds per second and the
judging's. Traffic goes only between the lab's own host addresses and agg loopbacks.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hpnlab.instrument import probeplan, tomography
from hpnlab.errors import SpecError
from hpnlab.traffic.run.nodetools import craft

# the defaults: 100 probes/s per path and a 5 s window give a path 500 probes, so a 1 % loss shows as ~5
# lost per path per window and ~10-25 over a link's 2-5 paths. Below min_loss (0.2 %) or min_lost (5 lost
# probes in the window) nothing is named: on synthetic windows of the default lab's paths, 0.1 % loss with
# min_lost 2 named the wrong link about as often as the right one (a link with two paths, both through the
# faulty one, reaches the threshold by chance); with 5, none in 100 windows (and the right one in 2)
# apart 2 and min_margin 4.6 (a likelihood ratio of 100): bench/prober_rules.py compares them with each
# alone and with neither on the default lab's own path map, 1 % loss starting on each of its links in turn
# (results/prober-rules); tests/test_prober_units.py runs a small version
DEFAULTS = {"rate": 100.0, "sports": 16, "cover": 2, "apart": 2, "window_s": 5.0, "step_s": 0.5, "grace_s": 1.0,
            "bucket_s": 0.5, "min_lost": 5, "min_loss": 0.002, "background": 1e-4, "min_confidence": 0.9,
            "min_margin": 4.6, "confirm": 2, "port": 9450}
# A path's bucket counts once its receiver has reported this long past the bucket's end (and the bucket is
# grace_s old): a probe not there by then is lost. Why: a receiver the machine did not run for a while
# writes its counts late, and judged on its sender's counts alone its paths lost every probe (a CI run
# named the access link into one host, a receiver a busy machine held back, beside the faulty uplink).
IN_FLIGHT_S = 0.25


def link_end(cfgs: dict, lk: str) -> tuple[str, str]:
    """'s0r0a>agg0-0' -> ('s0r0a', 'agg0-0'): the sending node and its interface toward the other."""
    a, b = lk.split(">")
    return a, next(i.name for i in cfgs[a].interfaces if i.peer == b)


class Prober:
    def __init__(self, rt, cfgs: dict, workdir: Path, **settings):
        bad = sorted(set(settings) - set(DEFAULTS))
        if bad:
            raise SpecError(f"prober.{bad[0]}: unknown setting; use {', '.join(DEFAULTS)}")
        self.s = {**DEFAULTS, **settings}
        if not 0 < self.s["rate"] <= 2000:
            raise SpecError("prober.rate: give probes per second per path, above 0 and at most 2000")
        self.rt, self.cfgs = rt, cfgs
        self.dir = Path(workdir) / "prober"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict] = []
        self.candidates: list[dict] = []
        self.coverage: dict[str, int] = {}
        self.procs: dict[str, object] = {}
        self.events: list[dict] = []
        self.judgements: list[dict] = []
        self._counts: dict[tuple[int, int], list[int]] = {}  # (path, bucket) -> [sent, received]
        self._cpu: dict[str, tuple[float, float]] = {}  # host -> (first, last) cpu_s
        self._reported: dict[str, float] = {}  # node -> its last line's time: what it received is counted to it
        self._offsets: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._streak: tuple[str | None, int] = (None, 0)
        self._judge_cpu = 0.0
        self.started = self.stopped = None

    # --- plan ---------------------------------------------------------------------------------------------
    def _hosts(self) -> list[str]:
        return sorted(n for n, c in self.cfgs.items() if c.role == "host")

    def _aggs(self) -> list[str]:
        return sorted(n for n, c in self.cfgs.items() if c.role == "agg")

    def _listen(self, node: str) -> list[str]:
        c = self.cfgs[node]
        return [n.ip for n in c.nics] if c.role == "host" else [c.router_id]

    def _map_one(self, host: str, nic) -> list[dict]:
        """One host NIC's path map to every other host's NIC the aggs lead to (another segment or another
        rail; a host's own other NIC is local to its kernel, never the fabric's)."""
        tors = set(nic.tors)
        dsts = {n.ip: (h, n) for h in self._hosts() for n in self.cfgs[h].nics if h != host and not tors & set(n.tors)}
        # and the aggs this NIC's ToRs lead to, to their loopbacks (a path ending at a switch), where the
        # host has a route there (the default lab's hosts have none: its agg-to-host paths do that work)
        aggs = {i.peer for t in nic.tors for i in self.cfgs[t].interfaces if i.kind == "uplink"}
        dsts |= {self.cfgs[a].router_id: (a, None) for a in sorted(aggs)
                 if self.rt.run(host, ["ip", "route", "get", self.cfgs[a].router_id, "from", nic.ip], check=False,
                                timeout=10).returncode == 0}
        sports = list(range(20000, 20000 + int(self.s["sports"])))
        res = craft(self.rt, host, ["paths", "--src", nic.ip, "--dst", ",".join(dsts), "--gateway", nic.gateway,
                                    "--sports", ",".join(map(str, sports)), "--ifaces", ",".join(nic.ports),
                                    "--dport", str(self.s["port"]), "--ttls", "1,2,3"], timeout=120)
        by_dst = res.get("by_dst") or {next(iter(dsts)): res["paths"]}
        loop = {c.router_id: n for n, c in self.cfgs.items() if c.role != "host"}
        port_tor = dict(zip(nic.ports, nic.tors))
        rows = []
        for dip, (dst, dn) in dsts.items():
            for sp in sports:
                h = by_dst.get(dip, {}).get(str(sp), {})
                port = h.get("tor", {}).get("iface")
                far = [loop.get(a, a) for a in h.get("hops", [])]
                row = {"src": host, "dst": dst, "src_ip": nic.ip, "dst_ip": dip, "sport": sp, "port": port,
                       "tor": port_tor.get(port, "?"), "agg": far[0] if far else "?",
                       "dst_tor": far[1] if len(far) > 1 else "?"}
                if dn is None:  # to an agg: the ToR the hash chose must be one of the agg's (else no route)
                    tor = row["tor"]
                    if tor == "?" or not any(i.peer == dst for i in self.cfgs[tor].interfaces):
                        continue
                    row["hops"] = [host, tor, dst]
                rows.append(row)
        return rows

    def _from_agg(self, agg: str) -> list[dict]:
        """Paths from an agg's loopback to every host NIC below it: the agg's own route (ip route get,
        with the probe's ports: a multipath route hashes them) names the ToR."""
        src = self.cfgs[agg].router_id
        below = {i.peer for i in self.cfgs[agg].interfaces}
        rows = []
        for h in self._hosts():
            for nic in self.cfgs[h].nics:
                if not below & set(nic.tors):
                    continue
                for sp in range(20000, 20000 + min(4, int(self.s["sports"]))):
                    r = self.rt.run(agg, ["ip", "-j", "route", "get", nic.ip, "from", src, "ipproto", "udp", "sport",
                                          str(sp), "dport", str(self.s["port"])], check=False, timeout=10)
                    try:
                        dev = json.loads(r.stdout)[0]["dev"]
                    except (ValueError, IndexError, KeyError):
                        continue
                    tor = self.cfgs[agg].iface(dev).peer if self.cfgs[agg].iface(dev) else "?"
                    rows.append({"src": agg, "dst": h, "src_ip": src, "dst_ip": nic.ip, "sport": sp,
                                 "hops": [agg, tor, h]})
        return rows

    def plan(self) -> dict:
        """Probe the path map and choose the paths; returns {"paths", "candidates", "short", "alike", "close"}
        (the links on too few paths, the groups no path tells apart, the pairs told apart by too few)."""
        jobs = [(h, n) for h in self._hosts() for n in self.cfgs[h].nics]
        with ThreadPoolExecutor(max_workers=4) as ex:
            rows = [r for part in ex.map(lambda j: self._map_one(*j), jobs) for r in part]
        rows += [r for a in self._aggs() for r in self._from_agg(a)]
        self.candidates = rows  # the whole path map, every source port (bench/prober_rules.py reads it)
        want = probeplan.fabric_links(self.cfgs)
        chosen, self.coverage = probeplan.choose(rows, int(self.s["cover"]), want, apart=int(self.s["apart"]))
        self.rows = [{**r, "id": i} for i, r in enumerate(chosen)]
        (self.dir / "paths.json").write_text(json.dumps(self.rows, indent=1))
        return {"paths": len(self.rows), "candidates": len(probeplan.complete(rows)),
                "short": probeplan.short(self.coverage, int(self.s["cover"])),
                "alike": probeplan.alike(chosen, want),
                "close": [list(p) for p in probeplan.close(chosen, want, int(self.s["apart"]))]}

    # --- run ----------------------------------------------------------------------------------------------
    def start(self) -> None:
        if not self.rows:
            self.plan()
        for h in self._hosts() + self._aggs():
            mine = [{k: r[k] for k in ("id", "src_ip", "sport", "dst_ip")} for r in self.rows if r["src"] == h]
            (self.dir / f"{h}.paths.json").write_text(json.dumps(mine))
            out = self.dir / f"{h}.jsonl"
            out.write_text("")
            argv = [sys.executable, "-m", "hpnlab.node.programs.prober", "--paths", str(self.dir / f"{h}.paths.json"),
                    "--listen", ",".join(self._listen(h)), "--port", str(self.s["port"]),
                    "--rate", str(self.s["rate"]), "--out", str(out), "--bucket", str(self.s["bucket_s"])]
            full = self.rt.exec_argv(h, argv)
            import subprocess

            with open(self.dir / f"{h}.log", "a") as lg:
                self.procs[h] = subprocess.Popen(full, stdout=lg, stderr=lg, stdin=subprocess.DEVNULL,
                                                 start_new_session=True)
        self.started = time.time()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        for p in self.procs.values():  # ours, by PID (their own sessions)
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=5)
            except Exception:
                p.kill()
        self.stopped = time.time()
        self._read()
        (self.dir / "events.json").write_text(json.dumps({"events": self.events, "report": self.report()}, indent=1))

    def __enter__(self) -> "Prober":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- judge --------------------------------------------------------------------------------------------
    def _read(self) -> None:
        for h in self.procs:
            path = self.dir / f"{h}.jsonl"
            try:
                with open(path) as fh:
                    fh.seek(self._offsets.get(h, 0))
                    data = fh.read()
            except OSError:
                continue
            done = data.rfind("\n") + 1  # a half-written last line waits for the next read
            self._offsets[h] = self._offsets.get(h, 0) + done
            for line in data[:done].splitlines():
                d = json.loads(line)
                self._reported[h] = max(self._reported.get(h, 0.0), d["t"])
                first = self._cpu.get(h, (d["cpu_s"], d["cpu_s"]))[0]
                self._cpu[h] = (first, d["cpu_s"])
                for i, (col, key) in enumerate((("sent", 0), ("recv", 1))):
                    for pid, bk in d[col].items():
                        for b, n in bk.items():
                            self._counts.setdefault((int(pid), int(b)), [0, 0])[key] += n

    def window(self, now: float | None = None) -> list[tomography.PathStat]:
        """Every path's probes sent and lost over the last ``window_s``: the buckets at least ``grace_s`` old
        whose receiver has reported past their end (IN_FLIGHT_S says why); a receiver behind has its paths
        judged on the buckets it has reported, not charged with what it has not reported yet."""
        now = now or time.time()
        w = self.s["bucket_s"]
        hi = int((now - self.s["grace_s"]) // w)  # buckets before this are complete
        lo = hi - max(1, round(self.s["window_s"] / w))
        upto = {r["id"]: min(hi, int((self._reported[r["dst"]] - IN_FLIGHT_S) // w)) if r["dst"] in self._reported
                else lo for r in self.rows}
        stats = {r["id"]: [0, 0] for r in self.rows}
        for (pid, b), (sent, got) in self._counts.items():
            if pid in stats and lo <= b < upto[pid]:
                stats[pid][0] += sent
                stats[pid][1] += min(got, sent)
        return [tomography.PathStat(probeplan.links_of(r), stats[r["id"]][0], stats[r["id"]][0] - stats[r["id"]][1])
                for r in self.rows]

    def judge(self, now: float | None = None) -> list[dict]:
        c0 = time.thread_time()
        now = now or time.time()
        sus = tomography.suspects(self.window(now), int(self.s["min_lost"]), self.s["min_loss"],
                                  self.s["background"])
        self.judgements.append({"t": round(now, 3), "suspects": sus[:3]})
        del self.judgements[:-200]
        top = tomography.named(sus, self.s["min_confidence"], self.s["min_margin"])
        self._streak = tomography.advance(self._streak, top)
        # a suspicion each time a link becomes the named top suspect (not while it stays so): deduplicating
        # over the last events instead left a second fault on the same link without its own suspicion
        if top and self._streak[1] == 1:
            self._event("suspected", top, now)
        if top and self._streak[1] == int(self.s["confirm"]):
            self._event("confirmed", top, now)
        self._judge_cpu += time.thread_time() - c0
        return sus

    def _event(self, what: str, s: dict, now: float) -> None:
        node, ifc = link_end(self.cfgs, s["link"])
        self.events.append({"t": round(now, 3), "event": what, "link": s["link"], "node": node, "iface": ifc,
                            "loss": s["loss"], "confidence": s["confidence"], "margin": s["margin"]})

    def _loop(self) -> None:
        while not self._stop.wait(self.s["step_s"]):
            self._read()
            if time.time() - self.started > self.s["grace_s"] + self.s["bucket_s"]:
                self.judge()

    # --- what it says ---------------------------------------------------------------------------------------
    def confirmed(self) -> list[dict]:
        return [e for e in self.events if e["event"] == "confirmed"]

    def health(self) -> list[dict]:
        """Every probed link over the last window: its loss bound, paths, probes; the current suspects."""
        bounds = tomography.link_bounds(self.window())
        named = {s["link"] for j in self.judgements[-1:] for s in j["suspects"]}
        return [{"link": lk, "node": link_end(self.cfgs, lk)[0], "iface": link_end(self.cfgs, lk)[1],
                 "loss": d["loss"], "paths": d["paths"], "sent": d["sent"], "lost": d["lost"],
                 "suspect": lk in named} for lk, d in sorted(bounds.items())]

    def totals(self) -> dict:
        """Running totals (probes sent, the node programs' and the judge's CPU seconds) at this moment: an
        experiment takes the difference over each repetition (hpnlab.traffic.run.graywatch). Read, not _read():
        the judging thread reads the node programs' files; list() copies the counts in one step under the GIL."""
        counts, cpu = list(self._counts.values()), list(self._cpu.values())
        return {"t": time.time(), "sent": sum(v[0] for v in counts),
                "node_cpu_s": sum(last - first for first, last in cpu), "judge_cpu_s": self._judge_cpu}

    def report(self) -> dict:
        end = self.stopped or time.time()
        span = max(1e-9, end - (self.started or end))
        cpu = sum(last - first for first, last in self._cpu.values())
        sent = sum(v[0] for v in self._counts.values())
        return {"paths": len(self.rows), "rate_per_path": self.s["rate"], "probes_per_s": round(sent / span, 1),
                "probe_bytes_per_s": round(sent * 64 / span), "node_cpu_s_per_s": round(cpu / span, 4),
                "judge_cpu_s_per_s": round(self._judge_cpu / span, 4), "span_s": round(span, 2),
                "min_cover": min(self.coverage.values()) if self.coverage else 0}

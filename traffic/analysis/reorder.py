"""Reordering as a figure: what a host's TCP counters say a run cost it in spurious retransmissions and
reorder events (``nstat``, per namespace: a lab host's counters are its own). Pure; the sampling is
``nstat -asz`` (absolute, every counter, no history file touched) before and after, and the figure is
the difference.

- ``spurious``: DSACKs the sender received (TcpExtTCPDSACKRecv): each says the receiver already had a
  segment that was sent again, a retransmission that reordering, not loss, caused;
- ``reorder_events``: the times the sender's TCP concluded a segment was reordered, not lost, by SACK,
  timestamps or (without SACK) duplicate ACKs (TCPSACKReorder + TCPTSReorder + TCPRenoReorder);
- ``retrans``: segments retransmitted (TcpRetransSegs) of ``out`` sent (TcpOutSegs), and ``retrans_ppm`` per
  million sent;
- ``ofo``: segments the receiver queued out of order (TcpExtTCPOFOQueue), counted on the receiving host.

The probes' own reordering (UDP, no retransmission to hide it) is hpnlab.traffic.analysis.measure.reordering per run;
``probes_aggregate`` takes it over the repetitions.
"""

from __future__ import annotations

SENDER = {"out": ("TcpOutSegs",), "retrans": ("TcpRetransSegs",), "spurious": ("TcpExtTCPDSACKRecv",),
          "reorder_events": ("TcpExtTCPSACKReorder", "TcpExtTCPTSReorder", "TcpExtTCPRenoReorder"),
          "spurious_rtos": ("TcpExtTCPSpuriousRTOs",)}
RECEIVER = {"ofo": ("TcpExtTCPOFOQueue",), "dsack_sent": ("TcpExtTCPDSACKOldSent", "TcpExtTCPDSACKOfoSent")}
NSTAT_ARGV = ["nstat", "-asz"]


def parse_nstat(text: str) -> dict[str, int]:
    """``nstat -asz`` text -> counter name -> value (the header line and the rate column ignored)."""
    out = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0][:1].isalpha() and words[1].isdigit():
            out[words[0]] = int(words[1])
    return out


def delta(before: dict[str, int], after: dict[str, int], keys: dict[str, tuple[str, ...]]) -> dict[str, int]:
    return {k: sum(after.get(n, 0) - before.get(n, 0) for n in names) for k, names in keys.items()}


def figures(sender: tuple[dict, dict], receiver: tuple[dict, dict] | None = None) -> dict:
    """The run's reordering figures from the sender's (and the receiver's) counters before and after."""
    s = delta(*sender, SENDER)
    # per million segments sent: a healthy run's few retransmissions are thousandths of a percent
    out = {**s, "retrans_ppm": round(1e6 * s["retrans"] / s["out"]) if s["out"] else None,
           "spurious_pct": round(100 * s["spurious"] / s["retrans"], 1) if s["retrans"] else None}
    if receiver is not None:
        out.update(delta(*receiver, RECEIVER))
    return out


def read_hosts(rt, hosts: list[str]) -> dict[str, dict[str, int]]:
    """Every host's counters now (one ``nstat`` per host namespace; a host whose read fails is left out)."""
    out = {}
    for h in hosts:
        r = rt.run(h, NSTAT_ARGV, check=False, timeout=10)
        if r.returncode == 0:
            out[h] = parse_nstat(r.stdout)
    return out


def of_run(samples: dict) -> dict | None:
    """A repetition's figures over all its hosts (tcpstats.json: {"before": {host: counters}, "after": ...}):
    every host sends and receives, so each counter is summed over all of them, then differenced."""
    before, after = samples.get("before") or {}, samples.get("after") or {}
    hosts = sorted(set(before) & set(after))
    if not hosts:
        return None
    names = {n for keys in (SENDER, RECEIVER) for ns in keys.values() for n in ns}
    b, a = ({n: sum(side[h].get(n, 0) for h in hosts) for n in names} for side in (before, after))
    return {**figures((b, a), (b, a)), "hosts": len(hosts)}


FIGURES = ("out", "retrans", "spurious", "reorder_events", "retrans_ppm", "spurious_pct", "ofo", "dsack_sent")


def aggregate(runs: list[dict]) -> dict | None:
    """A variant's TCP figures over its repetitions: {figure: {n, min, median, max}} (None: no run read them)."""
    from hpnlab.traffic.analysis.measure import summarise

    rows = [r["tcp"] for r in runs if r.get("tcp")]
    return {k: summarise([x.get(k) for x in rows]) for k in FIGURES} if rows else None


PROBE_FIGURES = ("out_of_order_pct", "distance_max", "distance_median", "distance_p99")


def probes_aggregate(runs: list[dict]) -> dict | None:
    """Each probe stream's reordering over the repetitions (hpnlab.traffic.analysis.measure.reordering per run):
    {stream: {figure: {n, min, median, max}}} (None: no run had probes)."""
    from hpnlab.traffic.analysis.measure import summarise

    names = [n for r in runs for n in (r.get("probes") or {})]
    if not names:
        return None
    rows = {n: [r["probes"][n].get("reorder") or {} for r in runs if n in (r.get("probes") or {})]
            for n in dict.fromkeys(names)}
    return {n: {k: summarise([x.get(k) for x in xs]) for k in PROBE_FIGURES} for n, xs in rows.items()}


def _mm(st: dict | None) -> str:
    if not st or st.get("median") is None:
        return "-"
    return f"{st['median']:g} [{st['min']:g}-{st['max']:g}]"


def summary_lines(results: dict) -> list[str]:
    """summary.txt's lines on TCP: per variant, median [min-max] over the repetitions, all hosts summed."""
    rows = [(name, v["tcp"]) for name, v in results.get("variants", {}).items() if v.get("tcp")]
    if not rows:
        return probe_lines(results)
    out = ["", "TCP over all hosts (median [min-max] per repetition): segments retransmitted (per million sent), "
               "spurious (DSACKed), reorder events, out-of-order queued at the receivers"]
    for name, t in rows:
        out.append(f"  {name}: retrans {_mm(t['retrans'])} ({_mm(t['retrans_ppm'])} ppm), spurious {_mm(t['spurious'])}, "
                   f"reorder events {_mm(t['reorder_events'])}, ofo {_mm(t['ofo'])}")
    return out + probe_lines(results)


def probe_lines(results: dict) -> list[str]:
    """summary.txt's lines on the probes' reordering: only streams that saw any (a hashed fabric keeps every
    flow on one path, and its summary stays as it was)."""
    rows = [(name, s, f) for name, v in results.get("variants", {}).items()
            for s, f in (v.get("probe_reorder") or {}).items() if (f["out_of_order_pct"].get("max") or 0) > 0]
    if not rows:
        return []
    out = ["", "probes arriving out of order (median [min-max] per repetition): % of the packets received, and the "
               "reorder distance of the late ones in packets of their flow (max, p99)"]
    for name, s, f in rows:
        out.append(f"  {name} {s}: {_mm(f['out_of_order_pct'])} %, distance max {_mm(f['distance_max'])}, "
                   f"p99 {_mm(f['distance_p99'])}")
    return out

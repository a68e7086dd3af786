"""The kernel's neighbour tables are one per machine, not one per namespace: every ARP and NDP entry of
every node of every lab counts against the same ``gc_thresh3`` (1024 entries by default; the knob exists
only in the first namespace). Past it, each new entry first runs a forced garbage collection over the
whole table and is then refused. A lab of the paper's segment needs ~2,000 IPv6 entries (BGP unnumbered:
one per fabric link end) and, once every host has talked to every peer of its rail through the ARP proxy,
up to ~266,000 IPv4 entries (one per peer on each of a NIC's two ports, as on a real host). Measured on the full segment
with the defaults: ~2 million forced collections in a few minutes, ~60 % of both cores in system time,
and half the BGP sessions stuck in Connect because their neighbour entries were evicted.

The same holds for the input backlog (``net.core.netdev_max_backlog``, one per machine, 1000 packets per
CPU by default): every veth hands each packet to the receiving CPU's backlog, drained in softirq, and on a
busy machine past the limit packets are dropped before any namespace sees them. Measured on the full
segment (link-failure-segment, Clos, 3 repetitions): at 1000, 670,000 packets dropped in one run, ToRs'
ARP probes to their hosts failed (535 neighbour entries FAILED at once on 16 ToRs), their /32s churned
through BGP and the access-link gap grew from 193 ms to 1,386 and 3,116 ms over the repetitions; at
30,000 (10 per link) none dropped and the gaps were 166-176 ms. So a lab raises it to 10 per link.

So before a lab's nodes exist, the thresholds are raised to what its size needs (never lowered), the
values found are kept in one record per machine (/run/hpnlab/.neigh-limits.json, whatever state root a lab
uses) with the labs that hold it, and the last of them to go puts the values back.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

PROC = Path("/proc/sys/net")
FAMILIES = {"ipv4": "ipv4/neigh/default", "ipv6": "ipv6/neigh/default"}
SLACK = 1024  # the machine's own entries, probes and tools of other labs
BACKLOG = "core/netdev_max_backlog"
BACKLOG_PER_LINK = 10
BACKLOG_DEFAULT = 1000  # the kernel's
# The kernel's neighbour limits are the machine's, so their record is too, whatever a lab's state root
# (under a root of its own, a lab once recorded another lab's raised value as the one to put back).
# Not a lab name: a runtime's running_labs() never lists it.
RECORD = Path("/run/hpnlab/.neigh-limits.json")


def entries_needed(topo: dict, cfgs: dict) -> dict[str, int]:
    """Neighbour entries the lab can hold at once, per family (pure; from the rendered lab)."""
    roles = {n["name"]: n["role"] for n in topo["nodes"]}
    fabric = sum(1 for lk in topo["links"] if roles[lk["a"]["node"]] != "host" and roles[lk["b"]["node"]] != "host")
    access = len(topo["links"]) - fabric
    per_subnet: dict[str, int] = {}
    for c in cfgs.values():
        if c.role == "host":
            for nic in c.nics:
                per_subnet[nic.subnet] = per_subnet.get(nic.subnet, 0) + 1
    # a host resolves each peer of its subnet (answered by the ToR's proxy) on each of its NIC's two ports
    peers = sum(n * (n - 1) * 2 for n in per_subnet.values())
    return {"ipv4": 2 * access + 2 * fabric + peers, "ipv6": 2 * fabric}


def thresholds(need: dict[str, int]) -> dict[str, int]:
    """sysctl path (under /proc/sys/net) -> value: no collection below the lab's size (a switch or host
    keeps its entries until they go stale), hard limit at four times it."""
    out = {}
    for fam, n in need.items():
        n += SLACK
        base = FAMILIES[fam]
        out.update({f"{base}/gc_thresh1": n, f"{base}/gc_thresh2": 2 * n, f"{base}/gc_thresh3": 4 * n})
    return out


def backlog(topo: dict) -> dict[str, int]:
    """The input backlog the lab's links need (pure): 10 packets per link, never below the kernel's 1000."""
    return {BACKLOG: max(BACKLOG_DEFAULT, BACKLOG_PER_LINK * len(topo["links"]))}


def read(key: str, root: Path = PROC) -> int | None:
    try:
        return int((root / key).read_text())
    except (OSError, ValueError):
        return None


@contextmanager
def _locked(record: Path):
    """One lab at a time reads and rewrites the record (labs deploy and go in parallel). The lock is on
    the record's directory, so no lock file is left behind."""
    record.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(record.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def raise_to(want: dict[str, int], record: Path, holder: str, root: Path = PROC) -> dict[str, int]:
    """Raise each threshold that is below ``want``; returns key -> value set for the ones changed.
    ``record`` (one file per machine) keeps the value first found for each key, the latest value set, and
    the labs (``holder``: a lab's state directory) that rely on them, so the last of them to go can put
    the machine back however many labs raised it in between. A lab that raises nothing holds it too: it
    runs on what others raised. gc_thresh3 goes first, thresh1 last, so thresh1 <= thresh2 <= thresh3
    holds at every step."""
    with _locked(record):
        saved, holders = _load(record)
        if holder not in holders:
            holders.append(holder)
        _save(record, saved, holders)
        changed: dict[str, int] = {}
        for key in sorted(want, reverse=True):  # .../gc_thresh3, 2, 1
            have = read(key, root)
            if have is not None and have < want[key]:
                saved.setdefault(key, [have, want[key]])[1] = want[key]
                _save(record, saved, holders)  # before the change: a crash right after still restores
                (root / key).write_text(str(want[key]))
                changed[key] = want[key]
        return changed


def release(record: Path, holder: str, alive: Callable[[str], bool], root: Path = PROC) -> list[str]:
    """``holder`` no longer needs the limits. Holders that are gone without saying so (``alive`` is False:
    their state was removed by hand) are dropped too. When none is left, the values are put back where
    they are still the ones labs set (someone else's later change is left alone), thresh1 first so the
    order holds while lowering, and the record is forgotten. Returns the keys restored."""
    with _locked(record):
        saved, holders = _load(record)
        holders = [h for h in holders if h != holder and alive(h)]
        if holders:
            _save(record, saved, holders)
            return []
        done = []
        for key, (found, set_) in sorted(saved.items()):
            if read(key, root) == set_:
                try:
                    (root / key).write_text(str(found))
                    done.append(key)
                except OSError:
                    pass
        record.unlink(missing_ok=True)
        return done


def held(record: Path, root: Path = PROC) -> dict[str, int]:
    """The machine-wide sysctls running labs raised and that still hold the value a lab set, by their sysctl
    names ({'net.core.netdev_max_backlog': 1920}); empty without a record."""
    saved, holders = _load(record)
    return {"net." + key.replace("/", "."): set_ for key, (_found, set_) in saved.items()
            if holders and read(key, root) == set_}


def _save(record: Path, saved: dict[str, list[int]], holders: list[str]) -> None:
    tmp = record.with_name(record.name + ".tmp")
    tmp.write_text(json.dumps({"limits": saved, "holders": holders}))
    tmp.replace(record)


def _load(record: Path) -> tuple[dict[str, list[int]], list[str]]:
    """(key -> [found, set], holders); a record without holders (as earlier versions wrote) has none."""
    try:
        data = json.loads(record.read_text())
        limits = data.get("limits", {}) if "holders" in data else data
        holders = [h for h in data.get("holders", []) if isinstance(h, str)]
        return {k: [int(v[0]), int(v[1])] for k, v in limits.items() if k in _KNOWN}, holders
    except (OSError, ValueError, TypeError, IndexError, AttributeError, KeyError):
        return {}, []


_KNOWN = {f"{base}/gc_thresh{i}" for base in FAMILIES.values() for i in (1, 2, 3)} | {BACKLOG}

"""An experiment's progress as it runs, for the live view (``hpnlab watch``): once a second the runner
appends one JSON line to ``live.jsonl`` in the lab's state directory (removed with the lab) saying which
repetition runs, its start and length, the faults applied and reverted so far, each probe stream's packets
sent and received and the workload's iterations done. The counts come from the node tools' ``<report>.live`` files
(hpnlab.node.reports.Live), which they rewrite at most once a second; the runner only reads them.

The watch server tails the file: nothing here talks to it, and a run with no page open costs one small
append a second."""

from __future__ import annotations

import json
import time
from pathlib import Path

FILE = "live.jsonl"
PERIOD_S = 1.0
KEEP_BYTES = 4 << 20  # past this the file starts again (a long run: ~200 bytes a second)


def read_count(path: Path) -> int | None:
    """The count a node tool last wrote to its ``.live`` file; None before it has written one."""
    try:
        return int(json.loads(path.read_text())["count"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Publisher:
    """One repetition's lines. ``tick()`` in the runner's loop writes at most once a second; ``close()``
    writes the last line (``done``)."""

    def __init__(self, lab_dir: Path, run_dir: Path, variant: str, label: str, t0: float, duration: float,
                 streams: list[dict], procs: list[dict], timeline: list[dict]):
        self.path = lab_dir / FILE
        self.head = {"variant": variant, "rep": label, "run_dir": str(run_dir), "t0": t0, "duration": duration}
        # stream name -> (its receiver's live file, its sender's, packets per second it is sent at)
        ends = {(p.get("probe"), p.get("role")): Path(p["out"] + ".live") for p in procs
                if p.get("role") in ("receiver", "sender")}
        self.streams = {s["name"]: (ends.get((s["name"], "receiver")), ends.get((s["name"], "sender")), s["pps"])
                        for s in streams if (s["name"], "receiver") in ends}
        self.ranks = [Path(p["out"] + ".live") for p in procs if p.get("role") not in ("receiver", "sender")
                      and p.get("out")]
        self.timeline = timeline  # the runner's fault records ({"label", "applied", "reverted"}), updated in place
        self.next_at = 0.0

    def line(self, now: float, done: bool = False) -> dict:
        streams = {name: {"received": read_count(rx), "sent": read_count(tx) if tx else None, "pps": pps}
                   for name, (rx, tx, pps) in self.streams.items()}
        counts = [c for c in map(read_count, self.ranks) if c is not None]
        return {"t": round(now, 3), **self.head, "done": done, "streams": streams,
                # every rank of a collective ends an iteration together: the job has done the fewest's count
                "iterations": min(counts) if counts else None,
                "faults": [{k: f.get(k) for k in ("label", "applied", "reverted")} for f in self.timeline]}

    def tick(self, done: bool = False) -> None:
        now = time.time()
        if now < self.next_at and not done:
            return
        self.next_at = now + PERIOD_S
        try:
            if self.path.exists() and self.path.stat().st_size > KEEP_BYTES:
                self.path.unlink()
            with open(self.path, "a") as f:
                f.write(json.dumps(self.line(now, done)) + "\n")
        except OSError:  # the lab's folder is gone (taken down under the run): the run itself says why
            pass

    def close(self) -> None:
        self.tick(done=True)


class Tail:
    """The watch server's reader: the lines appended since the last ``read()`` (a file that started again
    is read from its beginning)."""

    def __init__(self, lab_dir: Path):
        self.path = lab_dir / FILE
        self.pos = 0
        self.ino: int | None = None

    def read(self) -> list[dict]:
        try:
            st = self.path.stat()
        except OSError:
            self.pos, self.ino = 0, None
            return []
        if st.st_ino != self.ino or st.st_size < self.pos:
            self.pos, self.ino = 0, st.st_ino
        if st.st_size == self.pos:
            return []
        with open(self.path, "rb") as f:
            f.seek(self.pos)
            data = f.read(st.st_size - self.pos)
        end = data.rfind(b"\n") + 1  # a line being written is read next time
        self.pos += end
        out = []
        for raw in data[:end].splitlines():
            try:
                out.append(json.loads(raw))
            except ValueError:
                continue
        return out

"""iperf3: the real iperf3 between two hosts, with 100 ms interval reports."""

import json

from pydantic import Field

from hpnlab.errors import SpecError
from hpnlab.traffic.workloads.base import (START_SLACK, WorkloadKind, WorkloadParams, check_hosts, congestion_of,
                                            register)


class Iperf3Params(WorkloadParams):
    src: str | None = Field(None, description="the client host (it sends)")
    dst: str | None = Field(None, description="the server host")
    streams: int = Field(4, ge=1, le=64, description="parallel streams (-P)")


@register
class Iperf3(WorkloadKind):
    kind = "iperf3"
    help = "one iperf3 transfer between workload.src and workload.dst"
    series_label = "iperf3 throughput"
    Params = Iperf3Params

    def check(self, w, spec, cfgs, where):
        if not w.src or not w.dst:
            raise SpecError(f"{where} workload: iperf3 needs src and dst hosts")
        check_hosts(f"{where} workload", [w.src, w.dst], cfgs, w.rail)

    def launch(self, plan, run_dir, t0, duration):
        w = plan.workload
        src, dst = plan.host_ip(w.src, w.rail), plan.host_ip(w.dst, w.rail)
        # iperf3 -J prints its report on stdout, and an error (reported in it) is a result, not a crash: a
        # congestion control its sockets cannot have is such an error ("unable to set TCP_CONGESTION")
        common = {"stdout_report": True, "may_fail": True}
        return [{"role": "iperf3-server", "node": w.dst, "out": str(run_dir / "iperf3-server.json"), **common,
                 "settle": 0.3, "argv": ["iperf3", "-s", "-1", "-B", dst, "-p", "5201", "-J"]},
                {"role": "iperf3", "node": w.src, "out": str(run_dir / "iperf3.json"), "delay": START_SLACK, **common,
                 "argv": ["iperf3", "-c", dst, "-B", src, "-p", "5201", "-t", f"{duration:g}", "-i", "0.1",
                          "-P", str(w.streams), "-C", w.congestion, "-J"]}]

    def result(self, plan, run_dir):
        try:
            j = json.loads((run_dir / "iperf3.json").read_text())
        except (OSError, ValueError):
            return {"kind": "iperf3", "error": "no iperf3 report"}
        start = j.get("start", {}).get("timestamp", {}).get("timesecs", 0)
        return {"kind": "iperf3", "start": start, "error": j.get("error"),
                "intervals": [(start + iv["sum"]["start"], start + iv["sum"]["end"], iv["sum"]["bits_per_second"])
                              for iv in j.get("intervals", [])],
                "retransmits": j.get("end", {}).get("sum_sent", {}).get("retransmits"),
                # -C is the client's; the server takes it from the client and both say what their sockets ran
                "congestion": congestion_of([{"congestion": j.get("end", {}).get(f"{side}_tcp_congestion")}
                                             for side in ("sender", "receiver")])}

    def rate_series(self, w, t0, bin_s=0.25):
        return [(round(b - t0, 3), bps / 1e9) for _a, b, bps in w.get("intervals", [])]

    def window(self, w, t0, base_end, start, end):
        """Mean Gbit/s of the 100 ms intervals during the fault against those before it."""
        iv = w.get("intervals", [])
        base = [bps for a, b, bps in iv if a >= t0 + 0.5 and b <= base_end]
        dur = [bps for a, b, bps in iv if a >= start and b <= end]
        if not base or not dur:
            return {}
        b, d = sum(base) / len(base), sum(dur) / len(dur)
        return {"baseline_gbps": round(b / 1e9, 3), "gbps_during": round(d / 1e9, 3),
                "throughput_pct": round(100 * d / b, 1) if b else None}

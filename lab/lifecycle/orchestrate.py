"""Bringing labs up and down: the one place the CLI, the experiments and the Python API all go through.

    bring_up(spec, runtime)  render -> deploy -> poll verify until healthy; any error, Ctrl-C or an
                             unhealthy lab (unless keep) rolls everything back
    open_lab(name)           the runtime of a running lab (``hpnlab.Lab.attach`` and every CLI command)
    tear_down(name)          remove a lab; with its state.json damaged or missing, still remove what the
                             lab created, found by its names (``<lab>-*`` namespaces, its FRR pid files)
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext

from hpnlab import runtime as runtimes
from hpnlab.generate import frr, render
from hpnlab.lifecycle import verify
from hpnlab.machine import kernel
from hpnlab.model import topology
from hpnlab.errors import RuntimeFailure, SpecError, StateError, UsageError
from hpnlab.model.models import LabState, NodeConfig
from hpnlab.machine.progress import Progress
from hpnlab.machine.proc import is_node_process, processes
from hpnlab.machine.signals import DeadlinePassed, deadline, shielded
from hpnlab.runtime.base import Runtime, State, list_netns, load_nodes, running_labs, state_dir
from hpnlab.model.spec import Spec, check_lab_name, load_spec

POLL_MIN_S, POLL_MAX_S = 0.1, 0.5  # the health wait's pause between polls (wait_healthy says how it is chosen)


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise UsageError(f"'{what}' needs root (network namespaces, FRR): run 'sudo {what}' ('./bootstrap "
                         f"install' as root puts hpnlab on sudo's path)")


def resolve_lab(name: str | None) -> str:
    """The lab a command means: the one named, else the only running one, else the default spec's."""
    if name is not None:
        return check_lab_name(name, "--lab")
    labs = running_labs()
    if len(labs) == 1:
        return labs[0]
    if len(labs) > 1:
        raise SpecError(f"several labs are running ({', '.join(labs)}): choose one with --lab NAME")
    return load_spec().name


def open_lab(name: str) -> tuple[Runtime, dict[str, NodeConfig]]:
    """A running lab's runtime and node configs; one line if it is not running or its files are damaged."""
    name = check_lab_name(name, "--lab")
    if not state_dir(name).exists():
        raise UsageError(f"lab '{name}' is not running" + _running_hint())
    st = State.load(name)
    rt = runtimes.get(st.data.runtime)(name, st)
    return rt, load_cfgs(rt)


def adopt(clab_file: str, progress=None) -> tuple[Runtime, dict[str, NodeConfig]]:
    """A lab that ``containerlab deploy -t <lab>.clab.yml`` brought up by itself (its nodes configure
    themselves), taken into hpnlab's care: its state points at the generated folder (where each node's
    run/ directory holds its boot and agent status), so verify, status, faults, probes, experiments and
    ``down`` (containerlab destroy) work on it as on a lab from ``hpnlab up --runtime clab``."""
    from pathlib import Path

    from hpnlab.machine.nodesetup import host_driver

    progress = progress or (lambda m: None)
    path = Path(clab_file).resolve()
    folder = path.parent
    if not path.is_file():
        raise SpecError(f"attach: '{clab_file}' is not a file; give the <lab>.clab.yml that 'hpnlab generate' wrote")
    topo, cfgs = load_nodes(folder)  # one line if the folder is not hpnlab's output
    lab = check_lab_name(topo.get("name", ""), "topology.json name")
    if path.name != f"{lab}.clab.yml":
        raise SpecError(f"attach: '{path.name}' is not lab '{lab}''s topology ({lab}.clab.yml in {folder})")
    if state_dir(lab).exists():
        raise RuntimeFailure(f"lab '{lab}' is already known to hpnlab: use --lab {lab}")
    rt = runtimes.get("clab")(lab)
    missing = [n for n in cfgs if rt.netns(n) not in set(list_netns())]
    if missing:
        raise RuntimeFailure(f"lab '{lab}' is not deployed ({len(missing)} of {len(cfgs)} nodes missing, e.g. "
                             f"{missing[0]}): 'containerlab deploy -t {path}' first")
    st = rt.state.data
    st.runtime, st.config, st.started, st.clab_topology = "clab", str(folder), time.time(), str(path)
    st.host_driver = host_driver(next((c.driver or "auto" for c in cfgs.values() if c.role == "host"),
                                      "auto"), kernel.has("bonding"))
    st.netns = [rt.netns(n) for n in cfgs]
    rt.state.dir.mkdir(parents=True, exist_ok=True)
    os.symlink(folder, rt.config_dir)  # config_dir is <state>/config: the generated folder itself
    rt.state.save()
    progress(f"lab '{lab}': {len(cfgs)} containerlab nodes adopted from {folder}")
    rt.wait_booted(list(cfgs), progress)
    return rt, cfgs


def _running_hint() -> str:
    labs = running_labs()
    return f" (running: {', '.join(labs)})" if labs else " (no lab is running: 'hpnlab up')"


def load_cfgs(rt: Runtime) -> dict[str, NodeConfig]:
    return load_nodes(rt.config_dir)[1]


def wait_healthy(rt: Runtime, cfgs: dict[str, NodeConfig], timeout: float, progress) -> list[dict]:
    """Poll verify until every check passes or the deadline; report progress when it changes.

    A stage that passed is not asked again while a later one is still converging, nor a router whose BGP
    sessions were up and still have their connections (through vtysh that was ~1 CPU-s a poll on 140
    nodes); once every stage has passed, the ones skipped are checked again in full, and only a lab whose
    every stage passes then is healthy. Polls come every 0.1 s while they are cheap (counting TCP connections through sockets kept
    open in each router's namespace), further apart as a poll grows dearer: never more than a third of
    the wait is spent polling, nor a pause longer than 0.5 s."""
    deadline = time.monotonic() + timeout
    names = [n for n, _fn in verify.STAGES]
    passed: dict[str, list[dict]] = {}
    memo = verify.PollMemo()
    last = None
    try:
        while True:
            began = time.monotonic()
            ran = verify.run_stages(rt, cfgs, [n for n in names if n not in passed], bgp_memo=memo,
                                    deadline=deadline)
            took = time.monotonic() - began
            ok_now = {st: res for st, res in ran if all(c["ok"] for c in res)}
            if len(passed) + len(ok_now) == len(names):
                again = dict(verify.run_stages(rt, cfgs, list(passed), stop_at_failure=False)) if passed else {}
                if all(c["ok"] for res in again.values() for c in res):
                    merged = {**passed, **again, **ok_now}
                    return [c for n in names for c in merged[n]]
                passed = {}  # something regressed: poll every stage again
                memo.bgp.clear()
                continue
            checks = [c for res in passed.values() for c in res] + [c for _st, res in ran for c in res]
            passed.update(ok_now)
            if time.monotonic() > deadline:
                # the last poll's checks: a full verify here (~1 CPU-s a poll on 140 nodes, much more on a
                # loaded segment) would make the timeout no bound; what was not checked is named instead
                unchecked = [n for n in names if n not in passed and n not in dict(ran)]
                if unchecked:
                    checks.append({"name": "deadline", "ok": False,
                                   "detail": f"not checked within {timeout:g} s: {', '.join(unchecked)}"})
                return checks
            failing = next(c for c in checks if not c["ok"])
            line = f"waiting: {sum(c['ok'] for c in checks)} checks ok; {failing['name']}: {failing['detail']}"
            if line != last:
                progress(line)
                last = line
            # never past the deadline by more than a tick (the last poll then finds it passed)
            time.sleep(min(POLL_MAX_S, max(POLL_MIN_S, 2 * took), max(0.0, deadline - time.monotonic()) + 0.01))
    finally:
        memo.close()


def say_once(progress, line: str) -> None:
    """A line a Progress prints once however many labs it brings up (a run's variants); any other
    callable gets it every time."""
    said = getattr(progress, "said", None)
    if said is None:
        progress(line)
    elif line not in said:
        said.add(line)
        progress(line)


def bring_up(spec: Spec, runtime: str = "netns", timeout: float = 90.0, progress=None,
             keep: bool = False) -> tuple[Runtime, dict[str, NodeConfig], list[dict]]:
    """Render, deploy and wait until healthy; roll everything back on error, Ctrl-C or (unless keep)
    an unhealthy lab. Returns the runtime, the node configs and the last verify result."""
    progress = progress or Progress(quiet=True)
    started = time.monotonic()  # the timeout bounds the whole bring-up: deploy and the health wait
    cls = runtimes.get(runtime)
    cls.preflight(spec)
    lab = spec.name
    if state_dir(lab).exists():
        raise RuntimeFailure(f"lab '{lab}' is already running (or left over): 'hpnlab down --lab {lab}' first, "
                             f"or give the new lab another name")
    data = LabState(lab=lab, runtime=runtime, owner_pid=os.getpid())
    if cls.shares_kernel:  # namespaces and containers of this machine: its kernel decides, checked first
        found = kernel.assess(spec)
        if found.refusal:
            raise kernel.KernelError(found.refusal)
        for note in found.notes:
            say_once(progress, f"note: {note} (in full: hpnlab doctor)")
        data.kernel, data.kernel_notes, data.skip_sysctls = found.release, found.notes, found.skip_sysctls
    topo = topology.build(spec)
    rt = cls(lab, State(lab, data))
    try:
        rt.state.save()
        files = render.render(topo)
        files.update(rt.extra_files(files, topo))  # what this runtime deploys beside the lab's files
        render.write(files, rt.config_dir)
        progress(f"lab '{lab}': {topology.summary(topo)['links']} links, rendered to {rt.config_dir}")
        if spec.time_dilation > 1:
            d = spec.dilated()
            progress(f"time_dilation {spec.time_dilation}: every protocol timer {spec.time_dilation} times slower "
                     f"(BGP {d.bgp.keepalive}/{d.bgp.hold} s, BFD {d.bfd.interval_ms} ms x {d.bfd.multiplier}"
                     f"{' (off)' if not d.bfd.enabled else ''}, LACP {'fast' if d.lacp.fast_rate else 'slow'} x "
                     f"{spec.time_dilation}); the kernel and the links are not slowed")
        # A runtime that starts containers has its own deploy bound (HPNLAB_CLAB_TIMEOUT, HPNLAB_C9S_TIMEOUT:
        # image pulls take minutes); there the timeout is the health wait's, after it.
        with deadline(timeout - (time.monotonic() - started)) if not cls.self_configuring else nullcontext():
            rt.deploy(progress)
        cfgs = load_cfgs(rt)
        if cls.self_configuring:
            started = time.monotonic()
        progress("waiting for LACP, BGP, host routes and reachability")
        checks = wait_healthy(rt, cfgs, max(0.0, timeout - (time.monotonic() - started)), progress)
    except BaseException as e:
        progress(f"interrupted ({str(e) or 'SIGINT'}): rolling back" if isinstance(e, KeyboardInterrupt)
                 else f"failed: rolling back ({e})")
        with shielded():
            try:
                rt.destroy(progress)
            except Exception as undo:  # report both; the first error is what the user must fix
                progress(f"rollback incomplete ({undo}): 'hpnlab down --lab {lab}' removes the rest")
        if isinstance(e, DeadlinePassed):
            raise RuntimeFailure(f"lab '{lab}' not up within --timeout {timeout:g} s: the deploy alone took "
                                 f"longer (rolled back); give a longer --timeout") from None
        raise
    rt.state.data.owner_pid = None
    rt.state.save()
    if not verify.complete(checks) and not keep:
        progress("not healthy by the deadline: rolling back (keep=True / --keep leaves it up for debugging)")
        with shielded():
            rt.destroy(progress)
    return rt, cfgs, checks


def recovered_state(lab: str) -> LabState:
    """What a lab created, found by its deterministic names when its state.json is gone or damaged:
    namespaces ``<lab>-<node>`` (lab names have no '-', so no other lab's match), FRR pathspaces
    ``/var/run/frr/<lab>-<node>`` with their pid files, and a containerlab topology if one was rendered."""
    prefix = f"{lab}-"
    clab_prefix = f"clab-{lab}-"
    ns = [n for n in list_netns() if n.startswith(prefix) or n.startswith(clab_prefix)]
    frr_dirs = sorted(str(p) for p in frr.RUN.glob(f"{lab}-*") if p.is_dir())
    topo_file = state_dir(lab) / "config" / f"{lab}.clab.yml"
    clab = any(n.startswith(clab_prefix) for n in ns)
    return LabState(lab=lab, runtime="clab" if clab else "netns", netns=ns, frr_dirs=frr_dirs,
                    clab_topology=str(topo_file) if clab and topo_file.exists() else None)


def leftovers(lab: str) -> list[str]:
    """What carries a lab's name on this machine: namespaces, FRR directories, its state directory, and
    FRR daemons or hpnlab node processes serving it. Empty after ``down``."""
    lab = check_lab_name(lab, "--lab")
    out = [f"netns {n}" for n in list_netns() if n.startswith(f"{lab}-") or n.startswith(f"clab-{lab}-")]
    out += [f"frr dir {p}" for p in sorted(frr.RUN.glob(f"{lab}-*"))]
    if state_dir(lab).exists():
        out.append(f"state {state_dir(lab)}")
    for pid, argv in processes().items():
        if any(f"{lab}-" in a or f"/{lab}/" in a for a in argv) and (frr.is_daemon(argv) or is_node_process(argv)):
            out.append(f"process {pid} {argv[0]}")
    return out


def tear_down(lab: str, progress=None) -> bool:
    """Remove a lab and everything it created; False if there was nothing to remove."""
    progress = progress or Progress(quiet=True)
    lab = check_lab_name(lab, "--lab")
    try:
        st = State.load(lab)
    except StateError as e:
        data = recovered_state(lab)
        if not state_dir(lab).exists() and not data.netns and not data.frr_dirs and not leftovers(lab):
            return False
        if state_dir(lab).exists():
            progress(str(e).split(": 'hpnlab down")[0])
        progress(f"removing what carries the lab's name: {len(data.netns)} namespaces, "
                 f"{len(data.frr_dirs)} FRR directories and the processes in them")
        st = State(lab, data)
    rt = runtimes.get(st.data.runtime)(lab, st)
    with shielded("removing the lab"):
        rt.destroy(progress)
    return True

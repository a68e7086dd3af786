"""docs/tutorial.md runs as written: every command of its console blocks, in order, on a real lab, and every
output line the page shows is checked against what the command printed. The page cannot rot.

How the page is read (the rule the page states for its reader too):
- only ```console blocks run; in them a line that begins with `$ ` is a command (bash, in the checkout's
  folder), and the lines after it up to the next command are what the user will see;
- an output line `...` stands for lines left out; every other output line must appear within a line of
  the command's output (stdout and stderr as one stream; in any order: a background command's lines and
  another's interleave as the machine schedules them), where a number (not one inside a name such as s0h0
  or agg0-1, not an IPv4 address) stands for any number, a run of spaces for any run of spaces, and a lab
  name in quotes ('hpn', 'xp0') for any;
- every command must exit 0.

What differs from a user's shell, so that the test never touches a lab of the user's or of another test:
`sudo` is a shell function that runs its arguments (the suite runs as root), `hpnlab` on the PATH is this
file, which runs the real CLI with the lab named TUTORIAL_LAB instead of the default lab's 'hpn' (`up`
gets a copy of examples/default.yml with that name, every command that takes `--lab` gets it), an
experiment's labs named TUTORIAL_PREFIX<i> (`run` gets a copy of the experiment file with that
`lab_prefix`), and the page's scratch folder /tmp/tutorial is a fresh temporary one. The lab is taken
down at the end whatever happened."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

if __package__ in (None, ""):  # run as the `hpnlab` stand-in (below): the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import ROOT

PAGE = ROOT / "docs" / "tutorial.md"
SCRATCH = "/tmp/tutorial"
LAB = "tutorial"
PREFIX = "tut"
COMMAND_TIMEOUT = 600


def steps(text: str) -> list[tuple[str, list[str]]]:
    """(command, the output lines the page shows after it) for every `$ ` line of every console block."""
    out: list[tuple[str, list[str]]] = []
    for block in re.findall(r"^```console\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.splitlines():
            if line.startswith("$ "):
                out.append((line[2:], []))
            elif out and line.strip() and line.strip() != "...":
                out[-1][1].append(line)
    return out


_IPV4 = re.compile(r"\d+\.\d+\.\d+\.\d+(?:/\d+)?")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.-])\d+(?:\.\d+)?(?![0-9])")


def pattern(shown: str) -> re.Pattern:
    """The regex an output line the page shows stands for: numbers wildcarded, spacing free, lab names any."""
    parts, pos = [], 0
    for m in _IPV4.finditer(shown):  # addresses stay exact
        parts += [("text", shown[pos:m.start()]), ("exact", m.group())]
        pos = m.end()
    parts.append(("text", shown[pos:]))
    rx = ""
    for kind, s in parts:
        if kind == "exact":
            rx += re.escape(s)
            continue
        i = 0
        for m in _NUMBER.finditer(s):
            rx += _spaced(s[i:m.start()]) + r"[-+]?\d+(?:\.\d+)?"
            i = m.end()
        rx += _spaced(s[i:])
    rx = re.sub(r"'(?:hpn|xp\d+)'", "'[a-z][a-z0-9-]*'", rx)  # the default lab's and an experiment's lab names
    return re.compile(rx.strip())


def _spaced(s: str) -> str:
    return r"\s+".join(re.escape(w) for w in re.split(r"\s+", s)) if s.strip() else (r"\s+" if s else "")


def unmatched(shown: list[str], printed: str) -> list[str]:
    """The page's lines found within no line of what the command printed."""
    lines = printed.splitlines()
    return [want for want in shown if not any(pattern(want).search(line) for line in lines)]


def test_the_reading_rule():
    """The rule itself, without a lab: numbers wildcarded, names and addresses exact, a line within a line."""
    text = "x\n```console\n$ hpnlab up\n[   6.6s] lab 'hpn' is up and verified in 6.6 s\n...\n$ ls\n```\n"
    assert steps(text) == [("hpnlab up", ["[   6.6s] lab 'hpn' is up and verified in 6.6 s"]), ("ls", [])]
    assert not unmatched(["[   6.6s] lab 'hpn' is up and verified in 6.6 s"],
                         "a\n[ 12.0s] lab 'tutorial' is up and verified in 12.0 s\n")
    assert not unmatched(["variant dual-tor (1/2): bringing up lab 'xp0'"], "variant dual-tor (1/2): bringing up lab 'tut0'")
    assert unmatched(["64 bytes from 10.0.0.2: icmp_seq=1"], "64 bytes from 10.0.0.3: icmp_seq=9\n")
    assert not unmatched(["64 bytes from 10.0.0.2: icmp_seq=1"], "64 bytes from 10.0.0.2: icmp_seq=9\n")
    assert unmatched(["s0h0 ok"], "s1h0 ok\n") and unmatched(["agg0-1 ok"], "agg0-0 ok\n")
    assert unmatched(["b", "a", "c"], "xa\nbx\n") == ["c"]


def test_the_page_has_steps():
    got = steps(PAGE.read_text())
    assert len(got) >= 10 and all(c.strip() for c, _ in got)
    assert any(c.split()[:3] == ["sudo", "hpnlab", "up"] for c, _ in got)
    assert sum(len(shown) for _, shown in got) >= 20, "the page shows what the user will see"


# ---- the `hpnlab` stand-in on the PATH ----

def _lab_commands() -> set[str]:
    from hpnlab.cli import build_parser
    import argparse

    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    return {name for name, p in subs.items() if any("--lab" in a.option_strings for a in p._actions)}


def _experiment_copy(arg: str, folder: Path) -> str:
    """A copy of the experiment `arg` names (a file, or a name in experiments/) with its labs under PREFIX."""
    import yaml

    path = Path(arg) if Path(arg).suffix in (".yml", ".yaml") else ROOT / "experiments" / f"{arg}.yml"
    doc = yaml.safe_load(path.read_text())
    if doc.get("spec") and not Path(doc["spec"]).is_absolute():
        doc["spec"] = str((path.parent / doc["spec"]).resolve())
    doc["lab_prefix"] = PREFIX
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / path.name
    copy.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(copy)


def rewrite(argv: list[str], spec: str, scratch: Path) -> list[str]:
    """The CLI arguments the stand-in runs for ``argv`` (see the module's docstring)."""
    if not argv or argv[0].startswith("-"):
        return argv
    cmd, rest = argv[0], argv[1:]
    if cmd == "up" and not any(a.endswith((".yml", ".yaml")) for a in rest):
        rest = [spec, *rest]
    if cmd in _lab_commands() and "--lab" not in rest and not (cmd == "down" and rest and not rest[0].startswith("-")):
        rest = ["--lab", LAB, *rest]
    if cmd == "run":
        i = next(i for i, a in enumerate(rest) if not a.startswith("-") and (i == 0 or not rest[i - 1].startswith("-")))
        rest[i] = _experiment_copy(rest[i], scratch / f"experiment-{time.monotonic_ns()}")
    return [cmd, *rest]


def _as_hpnlab(argv: list[str]) -> int:
    args = rewrite(argv, os.environ["TUTORIAL_SPEC"], Path(os.environ["TUTORIAL_SCRATCH"]))
    os.execv(sys.executable, [sys.executable, "-m", "hpnlab.cli", *args])
    return 1


def test_rewrite():
    spec, scratch = "/s/lab.yml", Path("/nowhere")
    assert rewrite(["up"], spec, scratch) == ["up", spec]
    assert rewrite(["status"], spec, scratch) == ["status", "--lab", LAB]
    assert rewrite(["exec", "s0h0", "--", "ip", "-br", "addr"], spec, scratch)[:3] == ["exec", "--lab", LAB]
    assert rewrite(["compare", "a", "b"], spec, scratch) == ["compare", "a", "b"]


# ---- the tutorial on a lab ----

def _shell(command: str, env: dict, scratch: Path) -> subprocess.CompletedProcess:
    script = "sudo() { \"$@\"; }\nset -o pipefail\n" + command.replace(SCRATCH, str(scratch))
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=COMMAND_TIMEOUT)  # one stream: the order seen


def _take_down(env: dict) -> None:
    from hpnlab.lifecycle.orchestrate import leftovers

    for name in [LAB, *(f"{PREFIX}{i}" for i in range(8))]:
        if leftovers(name):
            subprocess.run([sys.executable, "-m", "hpnlab.cli", "down", "--lab", name], env=env,
                           capture_output=True, text=True, timeout=300)


@pytest.mark.root
def test_the_tutorial_runs_as_written(tmp_path):
    from tests.lib.labs import _need_lab_machine
    from hpnlab.lifecycle.orchestrate import leftovers

    _need_lab_machine()
    scratch = tmp_path / "tutorial"
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    stand_in = bin_ / "hpnlab"
    stand_in.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} \"$@\"\n")
    stand_in.chmod(0o755)
    spec = tmp_path / "lab.yml"
    spec.write_text(re.sub(r"(?m)^name: hpn$", f"name: {LAB}", (ROOT / "examples" / "default.yml").read_text()))
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "TUTORIAL_SPEC": str(spec),
           "TUTORIAL_SCRATCH": str(tmp_path), "PYTHONPATH": str(ROOT)}
    _take_down(env)  # a lab an interrupted run of this test left
    start = time.monotonic()
    try:
        for command, shown in steps(PAGE.read_text()):
            t0 = time.monotonic()
            r = _shell(command, env, scratch)
            printed = r.stdout
            print(f"$ {command}   [{time.monotonic() - t0:.1f} s, exit {r.returncode}]\n{printed}")
            assert r.returncode == 0, f"`{command}` exited {r.returncode}:\n{printed[-3000:]}"
            missing = unmatched([s.replace(SCRATCH, str(scratch)) for s in shown], printed)
            assert not missing, f"`{command}` did not print what docs/tutorial.md shows:\n" + \
                "\n".join(missing) + f"\n--- it printed:\n{printed[-4000:]}"
    finally:
        _take_down(env)
        print(f"tutorial: {time.monotonic() - start:.0f} s")
    assert leftovers(LAB) == []


if __name__ == "__main__":
    sys.exit(_as_hpnlab(sys.argv[1:]))

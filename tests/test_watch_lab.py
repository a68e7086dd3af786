"""The live view in a real browser, on a real lab: `hpnlab watch` serves a page that loads without a console
error and shows every node; a link-down applied the way `hpnlab fail` applies it turns that link down on the
page within 2 s, and its repair turns it back. A screenshot of each goes to the suite's output."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from hpnlab.generate.picture import link_id
from hpnlab.traffic import faults
from hpnlab.watch import topology_of
from tests.browser import page  # noqa: F401

pytestmark = [pytest.mark.root, pytest.mark.hpnlab(spec="default", name="wtch")]
NODE, IFACE = "s0h0", "r0p0"  # a host's port on rail 0: its ToR s0r0a loses carrier on h0p0


@pytest.fixture(scope="module")
def lab(hpnlab_lab):
    yield hpnlab_lab
    hpnlab_lab.down()


@pytest.fixture(scope="module")
def server(lab):
    """`hpnlab watch` on a free port, as a user starts it; its URL from the line it prints."""
    p = subprocess.Popen([sys.executable, "-m", "hpnlab", "watch", "--lab", lab.name, "--port", "0"],
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline, url = time.monotonic() + 60, None
        while url is None and time.monotonic() < deadline:
            line = p.stderr.readline()
            if not line and p.poll() is not None:
                pytest.fail(f"hpnlab watch exited {p.returncode} before it listened")
            m = re.search(r"(http://\S+)", line)
            url = m.group(1) if m else None
        assert url, "hpnlab watch printed no URL within 60 s"
        yield url
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def link_state(page, lid: str) -> str | None:  # noqa: F811
    return page.js("const l = document.querySelector(`line.link[data-link=\"${arguments[0]}\"]`);"
                   "return l ? l.getAttribute('data-state') : null;", lid)


def test_page_shows_every_node_and_a_link_down_within_2s(lab, server, page):  # noqa: F811
    page.open(server)
    page.wait_for("return window.watch && window.watch.updates >= 2 && Object.keys(window.watch.nodes).length",
                  30, "the page receiving the lab's state")
    shown = page.js("return Array.from(document.querySelectorAll('rect.node[data-ok]')).map(r => r.dataset.node)")
    assert sorted(shown) == sorted(lab.nodes), "every node of the lab drawn and coloured by its state"
    rows = page.js("return Array.from(document.querySelectorAll('#nodes tbody tr')).map(r => r.dataset.node)")
    assert sorted(rows) == sorted(lab.nodes)
    page.wait_for("return document.getElementById('health').textContent === 'healthy'", 30, "a healthy lab")
    assert page.console_errors() == []

    lk = next(lk for lk in topology_of(lab.runtime).links
              if (lk.a.node, lk.a.iface) == (NODE, IFACE) or (lk.b.node, lk.b.iface) == (NODE, IFACE))
    lid = link_id(lk)
    assert link_state(page, lid) == "up"
    f = faults.parse({"kind": "link-down", "node": NODE, "iface": IFACE}, "fault", lab.cfgs)
    inj = faults.Injector(lab.runtime, lab.cfgs)  # what `hpnlab fail` does
    inj.apply(f)
    try:
        applied = time.monotonic()
        page.wait_for(f"return document.querySelector('line.link[data-link=\"{lid}\"]')"
                      ".getAttribute('data-state') === 'down'", 2.0, f"link {lid} down on the page")
        print(f"link down on the page {time.monotonic() - applied:.2f} s after the fault", file=sys.stderr)
        page.wait_for("return window.watch.events.some(e => e.what.includes('fault applied: link-down'))", 2.0,
                      "the fault in the event list")
        page.screenshot("watch-link-down")
    finally:
        inj.revert_all()
    repaired = time.monotonic()
    page.wait_for(f"return document.querySelector('line.link[data-link=\"{lid}\"]')"
                  ".getAttribute('data-state') === 'up'", 2.0, f"link {lid} up again on the page")
    print(f"link up on the page {time.monotonic() - repaired:.2f} s after the repair", file=sys.stderr)
    lab.wait_healthy(60)
    page.wait_for("return document.getElementById('health').textContent === 'healthy'", 10, "healthy again")
    page.screenshot("watch-healthy")
    assert page.console_errors() == []

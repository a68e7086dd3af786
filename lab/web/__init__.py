"""What hpnlab's web pages are made of (the live view and the reports): assets shipped inside the package,
so a page is served or written with nothing fetched from the network.

The charts are uPlot (MIT licence, vendor/uPlot.LICENSE), taken unchanged from its npm package; the
version and each file's sha256 are pinned here and checked by tests/test_web_assets.py, so an
update is one deliberate change: `npm pack uplot@VERSION`, copy dist/uPlot.iife.min.js and
dist/uPlot.min.css into vendor/, and update VENDORED."""

from __future__ import annotations

import hashlib
from importlib import resources

VENDORED: dict[str, dict[str, str]] = {
    "uPlot.iife.min.js": {"package": "uplot", "version": "1.6.32",
                          "sha256": "19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f"},
    "uPlot.min.css": {"package": "uplot", "version": "1.6.32",
                      "sha256": "df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04"},
}


def asset(name: str) -> str:
    """The text of a vendored file (vendor/NAME), for inlining into a page."""
    if name not in VENDORED:
        raise KeyError(f"not a vendored web asset: {name} (one of {', '.join(sorted(VENDORED))})")
    return resources.files(__name__).joinpath("vendor", name).read_text(encoding="utf-8")


def sha256(name: str) -> str:
    return hashlib.sha256(asset(name).encode("utf-8")).hexdigest()

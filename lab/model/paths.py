"""Where hpnlab's data folders are: inside the installed package, or beside lab/ in a checkout."""

from __future__ import annotations

from pathlib import Path

PKG = Path(__file__).resolve().parents[1]  # the hpnlab package's folder (this file is in hpnlab/model/)


def data_dir(name: str) -> Path:
    """templates, examples or experiments: ``hpnlab/<name>`` in a wheel, ``<checkout>/<name>`` otherwise."""
    installed = PKG / name
    return installed if installed.is_dir() else PKG.parent / name


def checkout_root() -> Path | None:
    """The source checkout (for docker/ and the image build context), or None for an installed wheel."""
    root = PKG.parent
    return root if (root / "docker" / "Dockerfile").exists() else None

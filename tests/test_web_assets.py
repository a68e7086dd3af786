"""The web pages' vendored assets are the pinned files of their package, with its licence beside them."""

from __future__ import annotations

from hpnlab import web


def test_vendored_assets_are_the_pinned_files():
    for name, pin in web.VENDORED.items():
        assert web.sha256(name) == pin["sha256"], f"{name} is not {pin['package']} {pin['version']} as pinned"


def test_the_licence_ships_beside_them():
    from importlib import resources
    text = resources.files("hpnlab.web").joinpath("vendor", "uPlot.LICENSE").read_text()
    assert "MIT License" in text and "Leon Sorokin" in text


def test_an_unknown_asset_is_refused():
    import pytest
    with pytest.raises(KeyError, match="not a vendored web asset"):
        web.asset("jquery.js")

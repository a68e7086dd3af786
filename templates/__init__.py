"""Data shipped with hpnlab (found by hpnlab.model.paths), not code."""

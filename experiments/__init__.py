"""Data shipped with hpnlab (found by hpnlab.paths), not code."""

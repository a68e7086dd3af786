"""Fault kinds on a link or port: link-down, link-flap, one-way, peer-link-down, degrade, lacp-drop."""

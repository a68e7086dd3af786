"""Runtime subcommands (up, down, status, verify, exec, shell)."""

from __future__ import annotations


def add_parsers(sub, wrap) -> None:
    return None

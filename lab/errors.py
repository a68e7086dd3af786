"""Errors a user can act on: the CLI prints them as one line and exits 2, never a traceback."""


class HpnlabError(Exception):
    """Base for errors that carry a user-facing one-line message."""

    exit_code = 2


class SpecError(HpnlabError):
    """The spec (or an experiment file) is wrong: names the field and what is allowed."""


class UsageError(HpnlabError):
    """The command was used wrongly (not as root, a lab that is not running): exit 2 like bad input."""


class RuntimeFailure(HpnlabError):
    """Deploying, checking or tearing down a lab failed; the message says which step."""

    exit_code = 1


class StateError(RuntimeFailure):
    """A running lab's own files (state.json, node.json) are missing or damaged."""

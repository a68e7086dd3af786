"""hpnlab: emulate Alibaba HPN's non-stacked dual-ToR, dual-plane fabric on Linux, packet by packet.

    import hpnlab
    with hpnlab.Lab.up("examples/default.yml", name="t1") as lab:
        ...

``Lab`` and the errors are loaded on first use, so the code that runs inside a node (hpnlab.node)
imports this package without pulling in pydantic, Jinja2 or YAML.
"""

__version__ = "0.1.0"
__all__ = ["Lab", "ProbeResult", "EmulatorLate", "HpnlabError", "SpecError", "RuntimeFailure", "StateError", "__version__"]

_LAZY = {"Lab": "hpnlab.api", "ProbeResult": "hpnlab.api", "EmulatorLate": "hpnlab.api", "HpnlabError": "hpnlab.errors",
         "SpecError": "hpnlab.errors", "RuntimeFailure": "hpnlab.errors", "StateError": "hpnlab.errors"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hpnlab' has no attribute {name!r}")

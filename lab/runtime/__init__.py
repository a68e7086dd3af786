"""Runtime registry: a runtime is one module here named like the runtime, whose class registers itself
(``@register`` in base). ``get`` imports only the runtime asked for."""

from __future__ import annotations

import importlib
import pkgutil

from hpnlab.errors import SpecError
from hpnlab.runtime.base import REGISTRY, Runtime


NOT_RUNTIMES = {"base", "channel", "containers"}  # the shared plan, the exec channels and the image builds: parts of every runtime


def names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in NOT_RUNTIMES)


def get(name: str) -> type[Runtime]:
    if name not in names():
        raise SpecError(f"--runtime '{name}': choose one of {', '.join(names())}")
    importlib.import_module(f"{__name__}.{name}")
    return REGISTRY[name]

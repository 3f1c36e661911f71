"""wheeler2: cooperative multi-algorithm reinforcement learning.

The Python API (docs/python_api.md) is imported on first use, not here: ``import wheeler2`` and
``wheeler2 --help`` must not pay for torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> the module defining it, imported by __getattr__ when first asked for.
_LAZY = {
    "load_policy": "wheeler2.api",
    "Policy": "wheeler2.api",
    "run": "wheeler2.api",
    "validate": "wheeler2.api",
    "evaluate": "wheeler2.api",
    "export_policy": "wheeler2.export",
    "UsageError": "wheeler2.errors",
    "Callback": "wheeler2.callbacks",
    "CallbackError": "wheeler2.callbacks",
    "Checkpoint": "wheeler2.callbacks",
    "Eval": "wheeler2.callbacks",
    "Report": "wheeler2.callbacks",
    "STOP": "wheeler2.callbacks",
    "Stop": "wheeler2.callbacks",
    "StopAtReturn": "wheeler2.callbacks",
    "StopOnNoImprovement": "wheeler2.callbacks",
}

__all__ = [
    "STOP",
    "Callback",
    "CallbackError",
    "Checkpoint",
    "Eval",
    "Policy",
    "Report",
    "Stop",
    "StopAtReturn",
    "StopOnNoImprovement",
    "UsageError",
    "__version__",
    "evaluate",
    "export_policy",
    "load_policy",
    "run",
    "validate",
]

if TYPE_CHECKING:
    from wheeler2.api import Policy, evaluate, load_policy, run, validate
    from wheeler2.callbacks import (
        STOP,
        Callback,
        CallbackError,
        Checkpoint,
        Eval,
        Report,
        Stop,
        StopAtReturn,
        StopOnNoImprovement,
    )
    from wheeler2.errors import UsageError
    from wheeler2.export import export_policy


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'wheeler2' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

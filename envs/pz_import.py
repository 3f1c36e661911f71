"""Finding a PettingZoo env module by the part of an id after ``pettingzoo:``; shared by the
simultaneous (``pettingzoo``) and turn-based (``turns``) adapters and the arena."""

from __future__ import annotations

import importlib
from typing import Any


def import_env_module(path: str) -> Any:
    """The module named by the part of an id after ``pettingzoo:``.

    ``pettingzoo.<path>`` is tried first (the families shipped with PettingZoo), then ``<path>``
    (separate packages such as ``mpe2``). Only a failure to find the module itself falls through;
    an ImportError raised inside an existing module (a missing optional dependency) is re-raised,
    since hiding it would turn "install pymunk" into a misleading "no such env".
    """
    tried = []
    for name in (f"pettingzoo.{path}", path):
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not name.startswith(exc.name):
                raise
            tried.append(name)
    raise ModuleNotFoundError(
        f"no PettingZoo env module for 'pettingzoo:{path}': tried {', '.join(tried)} "
        f"(is the package installed? e.g. pip install 'pettingzoo[sisl]' or mpe2)"
    )


def make_parallel_env(path: str, kwargs: dict[str, Any] | None = None) -> Any:
    """``<module>.parallel_env(**kwargs)`` for an id path such as ``sisl.multiwalker_v9``."""
    module = import_env_module(path)
    if not hasattr(module, "parallel_env"):
        raise AttributeError(f"module '{module.__name__}' has no parallel_env() factory")
    return module.parallel_env(**(kwargs or {}))

"""An experiment file (TOML) -> a typed, validated, frozen :class:`Config`.

Every mistake a user can make in a file becomes one :class:`ConfigError` naming the file, the table,
the key and what was expected, before any process starts or any network is built. The file format
is the contract of ``../shared/DESIGN.md`` section 3; ``docs/config.md`` lists every key.

Modules: ``model`` (the dataclasses, which are also the schema: each default written once, bounds
in field metadata, see ``wheeler2.schema``), ``files`` (TOML parsed, ``extends`` merged, code
paths made absolute), ``reader`` (the generic table reader plus the rules a field cannot
state), ``overrides`` (``--set``), ``toml_out`` (a TOML writer), ``errors``. This package only
parses: the checks that need the env built (``wheeler2 check``) are
``wheeler2.runtime.probe``'s.
"""

from __future__ import annotations

from .errors import ConfigDeprecationWarning, ConfigError
from .model import (
    BACKENDS,
    ROLES,
    VECTOR_MODES,
    BufferConfig,
    Config,
    CurriculumConfig,
    EnvConfig,
    ExperimentConfig,
    HeadConfig,
    HerConfig,
    MemberConfig,
    PlayConfig,
    SyncConfig,
    TaskConfig,
)
from .overrides import apply_override
from .reader import RENAMED, TOP_LEVEL, load, validate
from .toml_out import dumps_toml

__all__ = [
    "BACKENDS",
    "RENAMED",
    "ROLES",
    "TOP_LEVEL",
    "VECTOR_MODES",
    "BufferConfig",
    "Config",
    "ConfigDeprecationWarning",
    "CurriculumConfig",
    "ConfigError",
    "EnvConfig",
    "ExperimentConfig",
    "HeadConfig",
    "HerConfig",
    "MemberConfig",
    "PlayConfig",
    "SyncConfig",
    "TaskConfig",
    "apply_override",
    "dumps_toml",
    "load",
    "validate",
]

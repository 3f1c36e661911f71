"""Curriculum stages (``[curriculum]``): an env that exposes ``set_curriculum_stage(k)`` is moved
from stage k to k + 1 at the first eval of the lead learner whose ``metric`` reaches
``advance_at[k]``, one stage per eval at most.

The coordinator decides (:func:`next_stage`, on each of the lead's evals) and writes the stage
into the run's control block (``Transport.set_stage``: the budget block's ``STAGE`` slot, the
Ray board); every member reads it through ``Budget.stage`` and applies it to its env copies and
eval env (:func:`apply_stage`) at its next step. The stage is part of the run state, so a
checkpoint carries it and ``resume`` starts every env at it (:func:`saved_stage`).

:func:`check_curriculum` is what ``wheeler2 check`` refuses: an env that has no stages, and a
metric no eval of this config produces.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from wheeler2.config import ConfigError

if TYPE_CHECKING:
    from wheeler2.config import Config
    from wheeler2.config.model import CurriculumConfig
    from wheeler2.runtime.evaluation import EvalResult
    from wheeler2.runtime.plan import MemberPlan

STAGE_METHOD = "set_curriculum_stage"
EVAL_RETURN = "eval_return"
# What a head-to-head eval reports per opponent kind (evaluation.Tally.figures), and the rating.
_MATCH_FIGURE = re.compile(r"(win|draw|loss|(win|nonloss)_(first|second|seat\d+))")
ELO = "elo"


def metric_value(metric: str, result: EvalResult) -> float | None:
    """The eval's figure ``metric``: its mean return, or a head-to-head figure (None when this
    eval did not produce it, e.g. an empty self-play pool)."""
    if metric == EVAL_RETURN:
        return float(result.mean_return)
    value = (result.matches or {}).get(metric)
    return None if value is None else float(value)


def next_stage(
    curriculum: CurriculumConfig, stage: int, result: EvalResult, ran_at: int = -1
) -> int:
    """The stage after an eval run at ``stage``: ``stage + 1`` where the eval's metric reached
    ``advance_at[stage]``, else ``stage``. Never more than one step, so every stage is trained
    on for at least one eval interval, however easy the next thresholds are.

    ``ran_at``: the stage the eval's envs were at (-1: not known). An eval that ran before the
    last change (in flight while the coordinator moved the stage, on local or ray) measured the
    stage before: it moves nothing, or one easy stage would skip the next."""
    if stage >= curriculum.stages - 1 or (ran_at >= 0 and ran_at != stage):
        return stage
    value = metric_value(curriculum.metric, result)
    if value is None or not math.isfinite(value) or value < curriculum.advance_at[stage]:
        return stage
    return stage + 1


def saved_stage(config: Config, payload: dict[str, Any] | None) -> int:
    """The stage a run starts at: the checkpoint's (resume), else 0; within ``[curriculum]
    stages`` should the file now declare fewer."""
    if config.curriculum is None:
        return 0
    run = (payload or {}).get("run") or {}
    stage = int((run.get("curriculum") or {}).get("stage", 0))
    return max(0, min(stage, config.curriculum.stages - 1))


def apply_stage(stage: int, *envs: Any) -> int:
    """Set ``stage`` on each env (None: a member without eval envs); returns ``stage``."""
    for env in envs:
        if env is not None:
            getattr(env, STAGE_METHOD)(stage)
    return stage


# --------------------------------------------------------------------------------------------
# what `check` refuses


def check_curriculum(config: Config, plan: MemberPlan) -> None:
    """Refuse, as one ConfigError naming ``[curriculum]`` and the key, a curriculum this run
    could never follow: a ``metric`` no eval of this config reports, or an env (probed as
    ``plan`` sees it) without ``set_curriculum_stage`` or without as many stages."""
    curriculum = config.curriculum
    if curriculum is None:
        return
    _check_metric(config, curriculum)
    from wheeler2.runtime.parts import make_env

    env = make_env(config, 1, 0, plan)
    try:
        if curriculum.metric != EVAL_RETURN and not hasattr(env, "seats"):
            raise _error(
                config,
                "metric",
                f"{curriculum.metric!r} is a head-to-head figure, which only turn-based games "
                f"report; '{config.env.id}' is not one: use {EVAL_RETURN!r}",
            )
        _check_stages(config, curriculum, env)
    finally:
        env.close()


def _error(config: Config, key: str, message: str) -> ConfigError:
    return ConfigError(str(config.path), "[curriculum]", key, message)


def _check_metric(config: Config, curriculum: CurriculumConfig) -> None:
    metric = curriculum.metric
    if metric == EVAL_RETURN:
        return
    kinds = tuple(config.play.eval_vs)
    figures = f"{EVAL_RETURN!r}, or vs_<opponent>/win (draw, loss, win_first, ...) or {ELO!r}"
    if not kinds:
        raise _error(
            config,
            "metric",
            f"expected {figures} with [play] eval_vs naming the opponents; this config runs no "
            f"head-to-head eval, got {metric!r}",
        )
    if metric == ELO:
        if "random" not in kinds:
            raise _error(
                config,
                "metric",
                "'elo' is rated against the random player: add \"random\" to [play] eval_vs",
            )
        return
    who, sep, figure = metric.partition("/")
    kind = who.removeprefix("vs_")
    if not (sep and who.startswith("vs_") and _MATCH_FIGURE.fullmatch(figure)):
        shown = ", ".join(f"'vs_{k}/win'" for k in kinds)
        raise _error(
            config,
            "metric",
            f"expected {EVAL_RETURN!r}, {ELO!r} or one of {shown} (draw, "
            f"loss, win_first, ... in place of win), got {metric!r}",
        )
    if kind not in kinds:
        raise _error(
            config,
            "metric",
            f"{metric!r} needs {kind!r} in [play] eval_vs (it has {list(kinds)}), or the eval "
            f"never reports it",
        )
    # Listed yet never played (opponents.match_figures): the run would stay at stage 0.
    play = config.play
    if kind == "tables" and not play.joint:
        raise _error(
            config,
            "metric",
            f"{metric!r}: the eval meets the other tables only with [play] joint = true, so "
            f"without it no eval reports vs_tables",
        )
    if kind == "pool" and play.opponents == "latest" and not play.random_share:
        raise _error(
            config,
            "metric",
            f"{metric!r}: [play] opponents = 'latest' (and no random_share) keeps no snapshot "
            f"pool, so no eval reports vs_pool; use opponents = 'uniform' or 'win_rate'",
        )


def _check_stages(config: Config, curriculum: CurriculumConfig, env: Any) -> None:
    """Every declared stage is one the env takes (set once each on the probe copy)."""
    setter = getattr(env, STAGE_METHOD, None)
    if setter is None:
        raise _error(
            config,
            "stages",
            f"{curriculum.stages} stages declared, but the adapter of '{config.env.id}' "
            f"({type(env).__name__}) cannot set a stage: it has no {STAGE_METHOD}(k)",
        )
    for k in range(curriculum.stages):
        try:
            setter(k)
        except AttributeError as exc:
            if STAGE_METHOD not in str(exc):
                raise _raised(config, k, exc) from None
            raise _error(
                config,
                "stages",
                f"{curriculum.stages} stages declared, but '{config.env.id}' has no "
                f"{STAGE_METHOD}(k): remove [curriculum] or give the env that method",
            ) from None
        except Exception as exc:  # noqa: BLE001 - the env's own refusal, e.g. too few stages
            raise _raised(config, k, exc) from None


def _raised(config: Config, k: int, exc: BaseException) -> ConfigError:
    return _error(
        config,
        "stages",
        f"'{config.env.id}' refused {STAGE_METHOD}({k}): {type(exc).__name__}: {exc}",
    )

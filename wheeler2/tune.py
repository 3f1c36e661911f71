"""Hyperparameter search: ``wheeler2 tune FILE --trials N`` over the space the file declares.

::

    [tune]
    trials = 20               # trials of the study in all (a re-run adds only the missing ones)
    seeds = [0, 1]            # each trial runs these seeds; its value is their mean
    metric = "final"          # each run's final eval return, or its "best"
    sampler = "tpe"           # Optuna's TPE, or "random"
    pruner = "median"         # Optuna's median rule on the first seed's evals, or "none"

    [tune.space]              # any key `--set` takes, quoted
    "team.target.params.lr_actor" = { range = [1e-4, 3e-3], log = true }
    "buffer.batch_size" = { choices = [64, 128, 256] }
    "team.target.params.learning_starts" = { range = [500, 5000] }   # ints: an integer

Optuna (Akiba et al. 2019) holds the study in ``OUT/tune-NAME/study.db`` (SQLite): a study
that was stopped (Ctrl-C, a machine that went away) goes on from its finished trials when the
same command runs again. A trial counts towards ``trials`` when it completed, was pruned or
failed on its own (its run raised: a diverging learning rate is a result of the search); one
stopped from outside (Ctrl-C, a killed process, found by Optuna's heartbeat) does not, so the
re-run runs it again. Each trial's runs are ordinary run directories under
``OUT/tune-NAME/trial-K/``; ``best.toml`` beside them is the file with the best trial's values
written in, runnable as it is (``wheeler2 run OUT/tune-NAME/best.toml``), and ``trials.md``
the table of every trial.

Pruning stops a trial whose first seed's best eval return so far falls below the median of
the completed trials' at the same point of the eval schedule (Optuna's ``MedianPruner``, after
five completed trials; reported through a run callback, :mod:`wheeler2.callbacks`): it ends at
that eval, with its checkpoint and summary. An eval is reported at its ``eval_every`` mark
(``env_steps // eval_every * eval_every``): evals of a team on ``local`` or ``ray`` fire at
whatever total the members have reached, and Optuna compares trials only at equal steps. The
closing eval, at the budget, is not pruned: the seed is whole by then. Later seeds of a trial
are not pruned: a trial that passed on its first seed is worth its full mean.

Trials run one after another, or ``--parallel P`` side by side as processes sharing the study;
each trial's team runs on the backend its file names (``ray`` included: a trial's members then
run on the cluster).
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheeler2.config.errors import ConfigError
from wheeler2.config.tune import Dimension, TuneSpec, read_tune

if TYPE_CHECKING:
    from wheeler2.config import Config

# -- the study -----------------------------------------------------------------------------------


def study_dir(config_path: Path, out: Path | None = None, overrides: Sequence[str] = ()) -> Path:
    from wheeler2.config import load

    # With the --set values: read without them, `--set experiment.name=b` put its study beside
    # the file's own (one study.db, one trial-K/ for both, best.toml and trials.md replaced).
    config = load(config_path, overrides)
    base = Path(out) if out is not None else Path(config.experiment.out)
    return base / f"tune-{config.experiment.name}"


@dataclass(frozen=True)
class _Plan:
    """One study, as every process that runs its trials needs it (picklable)."""

    config_path: Path
    spec: TuneSpec
    storage: str  # Optuna's storage URL: the study directory's SQLite file
    name: str  # the study's name: the experiment's
    where: Path  # the study directory
    total: int  # trials in all
    overrides: tuple[str, ...]
    parallel: int = 1

    def study(self) -> Any:
        import optuna

        spec = self.spec
        with warnings.catch_warnings():  # heartbeats and constant_liar are "experimental"
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler: optuna.samplers.BaseSampler
            if spec.sampler == "random":
                sampler = optuna.samplers.RandomSampler()
            else:  # the liar keeps side-by-side workers from sampling the same point
                sampler = optuna.samplers.TPESampler(constant_liar=self.parallel > 1)
            # A trial whose process was killed would stay "running" for ever: with a
            # heartbeat, the next trial to start marks it failed (not counted: _counts).
            storage = optuna.storages.RDBStorage(
                self.storage, heartbeat_interval=HEARTBEAT_S, grace_period=3 * HEARTBEAT_S
            )
        none = spec.pruner == "none"
        pruner = optuna.pruners.NopPruner() if none else optuna.pruners.MedianPruner()
        return optuna.create_study(
            study_name=self.name,
            storage=storage,
            direction="maximize",
            sampler=sampler,
            pruner=pruner,
            load_if_exists=True,
        )


HEARTBEAT_S = 60
ERROR = "error"  # the user attribute of a trial whose run raised: the error's line


def _counts(trial: Any) -> bool:
    """Whether a trial counts towards the study's total: completed, pruned, or failed on its
    own. A trial stopped from outside (Ctrl-C, a killed process) is run again."""
    import optuna

    state = optuna.trial.TrialState
    if trial.state == state.FAIL:
        return ERROR in trial.user_attrs
    return trial.state in (state.COMPLETE, state.PRUNED)


def _done(study: Any) -> int:
    return sum(_counts(t) for t in study.get_trials(deepcopy=False))


class _StopAtTotal:
    """Optuna callback: stop the study once ``total`` trials count (:func:`_counts`)."""

    def __init__(self, total: int) -> None:
        self.total = total

    def __call__(self, study: Any, trial: Any) -> None:
        if _done(study) >= self.total:
            study.stop()


def tune(
    config_path: Path,
    trials: int | None = None,
    parallel: int = 1,
    out: Path | None = None,
    overrides: Sequence[str] = (),
) -> Path:
    """Run the study of ``config_path`` to ``trials`` trials in all (``[tune] trials`` when
    None); returns the study directory (``best.toml``, ``trials.md``, ``study.db``)."""
    import optuna

    from wheeler2.config import load

    config_path = Path(config_path)
    config = load(config_path, overrides)  # the file must run as it is
    spec = check_space(config_path, config, overrides)
    fixed = _as_dict(overrides)
    where = study_dir(config_path, out, overrides)
    where.mkdir(parents=True, exist_ok=True)
    plan = _Plan(
        config_path,
        spec,
        f"sqlite:///{where / 'study.db'}",
        config.experiment.name,
        where,
        int(trials or spec.trials),
        tuple(overrides),
        max(1, parallel),
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = plan.study()
    _same_search(study, _search(config_path, fixed, spec), where)
    done = _done(study)
    if plan.total > done:
        print(f"study {where}: {done} trials done, {plan.total - done} to run", flush=True)
        try:
            if parallel <= 1:
                _optimize(plan)
            else:
                _in_processes(plan, parallel)
        except KeyboardInterrupt:
            # Ctrl-C is how a study is cut short: the trials that ended still get their table
            # and best file, then the interrupt goes on (exit 130).
            _write_results(plan, plan.study())
            raise
    _write_results(plan, plan.study())
    return where


SEARCH = "search"  # the study's user attribute: what its trials searched (_search)


def _search(config_path: Path, fixed: dict[str, Any], spec: TuneSpec) -> dict[str, Any]:
    """What makes two trials' values comparable: the file's config (its searched keys at one
    value each, so their defaults in the file do not matter), the space, the seeds, the metric."""
    import json
    import tomllib

    from wheeler2.api import _config
    from wheeler2.sweep import config_hash

    at = {d.key: d.choices[0] if d.choices is not None else d.low for d in spec.space}
    config = _config(config_path, {**fixed, **at})
    search = {
        "config_hash": config_hash(tomllib.loads(config.to_toml())),
        "space": [asdict(d) for d in spec.space],
        "seeds": list(spec.seeds),
        "metric": spec.metric,
    }
    return json.loads(json.dumps(search, default=str))  # as the study stores it


def _same_search(study: Any, search: dict[str, Any], where: Path) -> None:
    """The study directory is named after the experiment alone: a study of another space,
    seeds, metric or config (another file of that name, other --set values) is refused, not
    continued, or its trials would count as done and its best trial be written as this one's."""
    from wheeler2.errors import UsageError

    stored = study.user_attrs.get(SEARCH)
    if stored is None:  # a new study (or one from before this record)
        study.set_user_attr(SEARCH, search)
        return
    differ = sorted(k for k in search if stored.get(k) != search[k])
    if differ:
        raise UsageError(
            f"{where}: its study searched with another {', '.join(differ).replace('_', ' ')} "
            "than this file and --set give; its trials are not comparable with these: "
            "--out elsewhere, or remove that directory"
        )


def check_space(config_path: Path, config: Config, overrides: Sequence[str] = ()) -> TuneSpec:
    """The ``[tune]`` table of ``config`` (the file, its bases and ``--set`` read), each key of
    its space checked as a trial would set it: a key ``--set`` takes, at every choice or both
    ends of its range (what ``wheeler2 check`` and ``tune`` both refuse)."""
    from wheeler2.config.overrides import canonical_key

    spec = read_tune(config.raw, config_path)
    fixed = _as_dict(overrides)
    # team.0.params.lr and team.target.params.lr are one key: compare them by name.
    set_keys = {canonical_key(config.raw, key) for key in fixed}
    for dim in spec.space:  # each key must be one --set takes, checked at a value of its own
        if canonical_key(config.raw, dim.key) in set_keys:
            raise ConfigError(
                str(config_path),
                "[tune]",
                f'space."{dim.key}"',
                "is also given by --set; a key is either searched or set: drop one",
            )
        _check_key(config_path, fixed, dim)
    return spec


def _check_key(config_path: Path, fixed: dict[str, Any], dim: Dimension) -> None:
    """The file must take the key at every choice, or at both ends of its range."""
    from wheeler2.api import _config

    for value in dim.choices if dim.choices is not None else (dim.low, dim.high):
        try:
            _config(config_path, {**fixed, dim.key: value})
        except ConfigError as exc:
            raise ConfigError(
                str(config_path), "[tune]", f'space."{dim.key}"', f"at {value!r}: {exc.message}"
            ) from None
    if dim.choices is None and isinstance(dim.low, int) and isinstance(dim.high, int):
        # Integer ends draw integers: on a key that takes any number, `range = [0, 1]` for
        # tau would try 0 and 1 alone, and nothing would say so.
        between = dim.low + 0.5
        try:
            _config(config_path, {**fixed, dim.key: between})
        except ConfigError:
            return  # an integer key
        raise ConfigError(
            str(config_path),
            "[tune]",
            f'space."{dim.key}"',
            f"range = [{dim.low}, {dim.high}] has integer ends, so it draws integers only, and "
            f"this key takes any number ({between!r} too): write [{float(dim.low)!r}, "
            f"{float(dim.high)!r}] to search between them, or choices = [...] for a few values",
        )


def _as_dict(overrides: Sequence[str]) -> dict[str, Any]:
    from wheeler2.config.overrides import parse_override

    return dict(parse_override(item) for item in overrides)


def _optimize(plan: _Plan) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # a --parallel worker's own
    # Any error of a trial's run fails that trial and the study goes on, as a sweep's seed
    # fails alone (wheeler2.sweep.run_seed); Ctrl-C is not an Exception and stops it.
    plan.study().optimize(
        lambda trial: _objective(trial, plan),
        callbacks=[_StopAtTotal(plan.total)],
        catch=(Exception,),
    )


def _in_processes(plan: _Plan, parallel: int) -> None:
    import multiprocess as mp

    # Not daemonic: each trial's team starts member processes of its own.
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_worker, args=(plan, os.getpid()), name=f"wheeler2-tune-{i}")
        for i in range(parallel)
    ]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join()
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=10)
    died = [f"{p.name} (exit {p.exitcode})" for p in procs if p.exitcode not in (0, None)]
    if died:
        print(f"tune workers that did not end cleanly: {', '.join(died)}", file=sys.stderr)


def _worker(plan: _Plan, parent: int) -> None:
    """A ``--parallel`` worker: trials until the study has its count, or until ``parent`` (the
    ``wheeler2 tune`` process) is gone, killed or not, which stops the trial running as Ctrl-C
    would (:func:`wheeler2.process.stop_with_parent`)."""
    from wheeler2.process import stop_with_parent

    stop_with_parent(parent, "tune worker")
    try:
        _optimize(plan)
    except KeyboardInterrupt:  # the running trial closed its run; Optuna marked it failed
        sys.exit(130)


class _Prune:
    """The run callback that reports the first seed's evals to the trial, each at its
    ``eval_every`` mark, and ends the run when Optuna's pruner says so (never at the budget)."""

    def __init__(self, trial: Any, eval_every: int, total_steps: int) -> None:
        self.trial = trial
        self.every = max(1, int(eval_every))
        self.total = int(total_steps)
        self.reported = -1
        self.pruned = False

    def on_eval(self, ev: Any) -> Any:
        from wheeler2.callbacks import Stop

        step = int(ev.env_steps) // self.every * self.every
        if not ev.lead or step <= self.reported:  # a closing eval at a mark already reported
            return None
        self.reported = step
        self.trial.report(float(ev.mean_return), step)
        if step < self.total and self.trial.should_prune():
            self.pruned = True
            return Stop(f"pruned by Optuna at {ev.env_steps:,} env steps")
        return None


def _objective(trial: Any, plan: _Plan) -> float:
    import optuna

    try:
        return _score(trial, plan)
    except optuna.TrialPruned:
        raise
    except Exception as exc:  # counted, with its line for trials.md; Ctrl-C is not counted
        trial.set_user_attr(ERROR, " ".join(f"{type(exc).__name__}: {exc}".split())[:300])
        raise


def _score(trial: Any, plan: _Plan) -> float:
    import optuna

    from wheeler2.api import _config, run
    from wheeler2.log import read_summary

    spec = plan.spec
    values = {dim.key: dim.suggest(trial) for dim in spec.space}
    settings = {**_as_dict(plan.overrides), **values}
    exp = _config(plan.config_path, settings).experiment
    trial_dir = plan.where / f"trial-{trial.number}"
    scores = []
    for i, seed in enumerate(spec.seeds):
        prune = _Prune(trial, exp.eval_every, exp.total_steps) if i == 0 else None
        run_dir = run(
            plan.config_path,
            callbacks=[prune] if prune is not None else [],
            **settings,
            seed=seed,
            out=str(trial_dir),
        )
        trial.set_user_attr(f"run_seed_{seed}", str(run_dir))
        if prune is not None and prune.pruned:
            raise optuna.TrialPruned()
        summary = read_summary(run_dir)
        key = "final_eval_return" if spec.metric == "final" else "best_eval_return"
        value = summary.get(key)
        scores.append(-math.inf if value is None else float(value))
    return float(sum(scores) / len(scores))


def _write_results(plan: _Plan, study: Any) -> None:
    import optuna

    from wheeler2.api import _config
    from wheeler2.log import write_text_atomic

    spec, where = plan.spec, plan.where
    finished = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    lines = [
        f"# Study {study.study_name}: {len(study.trials)} trials "
        f"({len(finished)} finished), metric: mean {spec.metric} eval return over seeds "
        f"{list(spec.seeds)}",
        "",
        "| trial | state | value | " + " | ".join(d.key for d in spec.space) + " | note |",
        "| --- | --- | --- | " + " | ".join("---" for _ in spec.space) + " | --- |",
    ]
    for t in study.trials:
        # A pruned trial holds its last reported eval, not a mean over seeds: no value.
        complete = t.state == optuna.trial.TrialState.COMPLETE
        value = f"{t.value:.4g}" if complete and t.value is not None else "—"
        cells = [repr(t.params.get(d.key, "—")) for d in spec.space]
        lines.append(
            f"| {t.number} | {t.state.name.lower()} | {value} | "
            + " | ".join(cells)
            + f" | {_note(t)} |"
        )
    write_text_atomic(where / "trials.md", "\n".join(lines) + "\n")
    if not finished:
        print(f"no trial finished; trials: {where / 'trials.md'}", file=sys.stderr)
        return
    best = study.best_trial
    config = _config(plan.config_path, {**_as_dict(plan.overrides), **best.params})
    text = config.to_toml()
    header = (
        f"# The best trial ({best.number}) of {where}: mean {spec.metric} eval return "
        f"{best.value:.4g} over seeds {list(spec.seeds)}\n"
        + "".join(f"# {k} = {v!r}\n" for k, v in best.params.items())
    )
    write_text_atomic(where / "best.toml", header + text)
    print(f"best trial {best.number}: {best.value:.4g} {best.params}")
    print(f"best config: {where / 'best.toml'}; every trial: {where / 'trials.md'}")


def _note(trial: Any) -> str:
    import optuna

    state = optuna.trial.TrialState
    if trial.state == state.PRUNED:
        return f"pruned at {trial.last_step:,} env steps" if trial.last_step is not None else ""
    if trial.state == state.FAIL:
        error = trial.user_attrs.get(ERROR)
        return error.replace("|", "\\|") if error else "stopped before it ended: not counted"
    return ""

"""The ``wheeler2`` command: run | check | eval | export | resume | plot | report | tune.

Exit codes: 0 success, 2 an invalid config, usage or checkpoint (message only, no traceback),
130 interrupted, 1 anything else (with its traceback, since that is a bug to report).
"""

from __future__ import annotations

import argparse
import math
import sys
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheeler2.errors import UsageError

if TYPE_CHECKING:
    from wheeler2.config import Config

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_INVALID = 2
EXIT_INTERRUPTED = 130

# What `wheeler2 resume --set` may change: how long the run goes on and how often it reports.
# And how the run is watched: a run killed as hung on a loaded machine goes on with a longer
# heartbeat_s, which changes no figure of the experiment.
RESUME_KEYS = (
    "experiment.total_steps",
    "experiment.eval_every",
    "experiment.checkpoint_every",
    "experiment.heartbeat_s",
    "experiment.progress",
)


def _add_overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="TABLE.KEY=VALUE",
        help="override one key, e.g. --set buffer.n_step=3 --set team.target.params.gamma=0.9",
    )


def _finite(text: str) -> float:
    """An argparse type: a finite number (a nan threshold is passed by no eval, so every seed
    would count as unsolved without a word)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text}")
    return value


def _positive(text: str) -> int:
    """An argparse type: a count of at least one (0 episodes would otherwise mean the default)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("wheeler2")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wheeler2",
        description="Cooperative multi-algorithm reinforcement learning, declared in TOML.",
    )
    parser.add_argument("--version", action="version", version=f"wheeler2 {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run an experiment file")
    run.add_argument("file", type=Path)
    _add_overrides(run)
    run.add_argument("--seed", type=int, help="override experiment.seed")
    run.add_argument("--out", help="override experiment.out (the parent of run directories)")
    run.add_argument(
        "--seeds",
        metavar="LIST",
        help="run once per seed into one sweep directory: 0-9, 0,3,7 or 0-4,8 (not with --seed)",
    )
    run.add_argument(
        "--parallel",
        nargs="?",
        const="auto",
        metavar="N",
        help="with --seeds: run N seeds side by side (alone: as many as the cores allow, "
        "cores // processes per run); default one after another",
    )

    check = sub.add_parser("check", help="validate an experiment file without running it")
    check.add_argument("file", type=Path)
    _add_overrides(check)

    evaluate = sub.add_parser("eval", help="evaluate a run's learner from its checkpoint")
    evaluate.add_argument("run_dir", type=Path)
    evaluate.add_argument(
        "--episodes", type=_positive, help="default: experiment.eval_episodes (100 with --vs)"
    )
    evaluate.add_argument("--checkpoint", choices=("best", "latest"), default="best")
    evaluate.add_argument(
        "--video",
        type=Path,
        metavar="OUT.mp4|OUT.gif",
        help="also record each episode (gymnasium envs): OUT_ep0.mp4, OUT_ep1.mp4, ...",
    )
    evaluate.add_argument(
        "--vs",
        metavar="RUN2|random",
        help="multi-agent envs: play the run's tables against another run's or random play "
        "(a self-play table of a two-player game: both seats, W/D/L and Elo)",
    )

    export = sub.add_parser("export", help="write a run's policy as a TorchScript or ONNX file")
    export.add_argument("run_dir", type=Path)
    export.add_argument("--format", choices=("torchscript", "onnx"), required=True)
    export.add_argument("-o", "--output", type=Path, help="default: RUN_DIR/policy.pt|.onnx")
    export.add_argument("--checkpoint", choices=("best", "latest"), default="best")

    resume = sub.add_parser(
        "resume",
        help="continue an interrupted run from its latest checkpoint, or extend it; "
        "continue an interrupted sweep (a sweep directory)",
    )
    resume.add_argument("run_dir", type=Path, metavar="DIR", help="a run or sweep directory")
    resume.add_argument(
        "--parallel",
        nargs="?",
        const="auto",
        metavar="N",
        help="a sweep directory: run N of its seeds side by side (alone: as many as the cores "
        "allow); default one after another",
    )
    resume.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="experiment.KEY=VALUE",
        help="extend the run: only " + ", ".join(RESUME_KEYS) + " (e.g. --set "
        "experiment.total_steps=50000); every other key would change the experiment",
    )

    plot = sub.add_parser("plot", help="draw eval return curves of one or more runs")
    plot.add_argument("run_dirs", type=Path, nargs="+")
    plot.add_argument("-o", "--output", type=Path, default=Path("curves.png"))
    plot.add_argument("--x", choices=("env_steps", "wall_s"), default="env_steps")

    report = sub.add_parser(
        "report",
        help="statistics over seeds of sweeps or runs: median, IQM, 95%% intervals, solved",
    )
    report.add_argument(
        "dirs", type=Path, nargs="+", metavar="DIR", help="sweep or run directories, or folders"
    )
    report.add_argument(
        "-o", "--output", type=Path, help="folder for report.md/.json/.png (default: first DIR)"
    )
    report.add_argument(
        "--by", choices=("config", "sweep"), default="config", help="group runs (default: config)"
    )
    report.add_argument("--threshold", type=_finite, help="default: each file's eval_threshold")
    report.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")

    tune = sub.add_parser(
        "tune", help="search the [tune] space of an experiment file (Optuna, docs/experiments.md)"
    )
    tune.add_argument("file", type=Path)
    tune.add_argument("--trials", type=int, help="trials of the study in all (default: [tune])")
    tune.add_argument(
        "--parallel", type=int, default=1, metavar="P", help="trials side by side (processes)"
    )
    tune.add_argument("--out", help="override experiment.out (the study goes in OUT/tune-NAME)")
    _add_overrides(tune)
    return parser


def _load(path: Path, overrides: Sequence[str] = (), **kwargs: Any) -> Config:
    """``config.load``, with renamed-key warnings as one plain stderr line each."""
    from wheeler2.config import ConfigDeprecationWarning, load

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigDeprecationWarning)
        config = load(path, overrides, **kwargs)
    shown = set()
    for w in caught:
        if not issubclass(w.category, ConfigDeprecationWarning):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        elif str(w.message) not in shown:
            shown.add(str(w.message))
            print(f"warning: {w.message}", file=sys.stderr)
    return config


def _describe(config: Config) -> str:
    members = sum(m.count for m in config.team)
    return f"{members} member{'s' if members != 1 else ''}, backend {config.experiment.backend}"


def _cmd_check(args: argparse.Namespace) -> int:
    from wheeler2.runtime.probe import check_with_env

    config = _load(args.file, args.overrides)
    if "tune" in config.raw:  # each searched key as a trial sets it, as `tune` checks it
        from wheeler2.tune import check_space

        check_space(Path(args.file), config, args.overrides)
    # Builds the team once without training: what `run` would fail on fails here, as one line.
    check_with_env(config)
    _warn_relations(config)  # only for a valid file: an invalid one gets its one error line
    print(f"ok: {args.file} ({_describe(config)})")
    return EXIT_OK


def _warn_relations(config: Config) -> None:
    """One ``warning:`` line per key relation the run will not keep (a warm-up longer than
    the run): it runs, but will not do what the file seems to ask."""
    from wheeler2.config.relations import relation_warnings

    for line in relation_warnings(config):
        print(f"warning: {line}", file=sys.stderr)


def _cmd_run(args: argparse.Namespace) -> int:
    seeds = _sweep_seeds(args)
    seed = args.seed if seeds is None else seeds[0]
    config = _load(args.file, args.overrides, seed=seed, out=args.out)
    out = Path(config.experiment.out)
    if out.exists() and not out.is_dir():
        # Run directories go under `out`; a file there would fail only once members have started.
        where = "--out" if args.out is not None else f"{args.file}: [experiment] out"
        raise UsageError(f"{where} {out}: is an existing file; expected a directory")
    _warn_relations(config)
    if seeds is not None:
        from wheeler2.sweep import run_sweep

        return run_sweep(args.file, seeds, args.overrides, _load, args.out, args.parallel)
    from wheeler2.runtime import run_experiment

    print(f"running {config.experiment.name} ({_describe(config)})", flush=True)
    run_dir = run_experiment(config)
    _report_results(Path(run_dir))
    return EXIT_OK


def _sweep_seeds(args: argparse.Namespace) -> list[int] | None:
    """The seeds of ``--seeds`` (None without it), refusing the flags it cannot go with."""
    if args.seeds is None:
        if args.parallel is not None:
            raise UsageError("--parallel runs the seeds of --seeds side by side; add --seeds")
        return None
    if args.seed is not None:
        raise UsageError("--seed and --seeds: give one (--seeds 0-9 runs each of those seeds)")
    from wheeler2.sweep import parse_seeds

    return parse_seeds(args.seeds)


def _resume_overrides(overrides: Sequence[str]) -> list[str]:
    """The ``--set`` overrides of ``resume``: only :data:`RESUME_KEYS` (one error line naming
    the first other key: it would change the experiment the checkpoint belongs to)."""
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if key not in RESUME_KEYS:
            raise UsageError(
                f"--set {key}: resume changes only {', '.join(RESUME_KEYS)}; any other key "
                "changes the experiment (start a new run with wheeler2 run --set ...)"
            )
    return list(overrides)


def _cmd_resume(args: argparse.Namespace) -> int:
    from wheeler2.api import run_config_path
    from wheeler2.sweep import SWEEP_FILE, resume_sweep

    if (args.run_dir / SWEEP_FILE).is_file():
        if args.overrides:
            raise UsageError(
                f"{args.run_dir}: a sweep goes on as it began; --set extends one run "
                f"(wheeler2 resume {args.run_dir / 'seed-K'} --set ...)"
            )
        return resume_sweep(args.run_dir, _load, args.parallel)
    if args.parallel is not None:
        raise UsageError(
            f"--parallel runs the seeds of a sweep directory side by side; {args.run_dir} "
            f"has no {SWEEP_FILE}"
        )
    overrides = _resume_overrides(args.overrides)
    config = _load(run_config_path(args.run_dir), overrides)
    from wheeler2.runtime import run_experiment

    extended = f" ({', '.join(overrides)})" if overrides else ""
    print(f"resuming {args.run_dir}{extended}", flush=True)
    run_dir = run_experiment(config, args.run_dir, resume=True)
    _report_results(Path(run_dir))
    return EXIT_OK


def _report_results(run_dir: Path) -> None:
    from wheeler2.log import read_summary

    print(f"results: {run_dir}")
    try:
        summary = read_summary(run_dir)
    except (FileNotFoundError, ValueError):
        return
    figures = [
        ("env steps", summary.get("env_steps")),
        ("wall s", summary.get("wall_s")),
        ("start-up s (command to first step)", summary.get("startup_s")),
        ("best eval return", summary.get("best_eval_return")),
        ("final eval return", summary.get("final_eval_return")),
        ("steps to threshold", summary.get("steps_to_threshold")),
    ]
    for label, value in figures:
        if value is not None:
            print(f"  {label}: {_fmt(value)}")


def _fmt(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _cmd_eval(args: argparse.Namespace) -> int:
    from wheeler2.api import evaluate, run_config_path, versus

    if args.vs is not None:
        if args.video is not None:
            raise UsageError("--video records single-agent episodes; not with --vs")
        print("\n".join(versus(args.run_dir, args.vs, args.episodes, args.checkpoint).lines()))
        return EXIT_OK
    if args.video is not None:
        from wheeler2.video import check_output, make_render_env

        # Refuse a bad --video before the evaluation spends its time.
        check_output(args.video)
        make_render_env(_load(run_config_path(args.run_dir))).close()
    result = evaluate(args.run_dir, args.episodes, args.checkpoint)
    episodes = _count(result.get("episodes"), "episode")
    line = (
        f"{result.get('checkpoint', args.checkpoint)}: {episodes}, "
        f"return {result['mean_return']:.2f} +- {result['std_return']:.2f}"
    )
    if result.get("success") is not None:
        line += f", success {result['success']:.2f}"
    print(line)
    if args.video is not None:
        from wheeler2.video import older_episodes, record

        done = record(args.run_dir, args.video, args.episodes, args.checkpoint)
        for rec in done:
            print(f"wrote {rec.path} ({rec.frames} frames, return {rec.episode_return:.2f})")
        older = older_episodes(Path(args.video), len(done))
        if older:
            names = ", ".join(p.name for p in older)
            print(f"note: {names} in {older[0].parent} are from an earlier call, not this one")
    return EXIT_OK


def _count(n: Any, noun: str) -> str:
    """``1 episode``, ``2 episodes``."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _cmd_export(args: argparse.Namespace) -> int:
    from wheeler2.api import load_policy
    from wheeler2.export import write_policy

    policy = load_policy(args.run_dir, args.checkpoint)
    kind = _action_kind(policy)  # before the file is written: a failure here leaves none
    out = write_policy(policy, args.format, args.output)
    dtype, dim = policy.input_dtype, policy.input_dim
    print(f"wrote {out}: input {dtype} [B, {dim}] = [{policy.input_layout}]")
    print(f"  output: action, {kind}")
    # Which policy the file holds: "best" falls back to latest.pt before the first eval, and a
    # run of several tables has one learner each, of which the lead's is exported.
    loaded = policy.loaded
    source = f"  from: learner {loaded.member!r} ({loaded.algo}), {loaded.checkpoint.name}"
    others = [m.name for m in loaded.config.team if m.role == "learner" and m.name != loaded.member]
    if others:
        source += f"; the run's other learners ({', '.join(others)}) are not in it"
    print(source)
    return EXIT_OK


def _action_kind(policy: Any) -> str:
    """What the exported module returns, with the env's real sizes: ``float32 [B, 1] in the
    env's Box [-2, 2]`` or ``int64 [B] in 0..3``."""
    import numpy as np

    space = policy.action_space
    if space is None:  # an adapter without a gymnasium space (Unity) takes the engine's units
        act_dim = int(policy.loaded.info.act_dim)
        if policy.discrete:
            return f"int64 [B] in 0..{act_dim - 1}"
        return f"float32 [B, {act_dim}] in [-1, 1], the env's own units"
    if policy.discrete:
        start, n = int(getattr(space, "start", 0)), int(space.n)
        return f"int64 [B] in {start}..{start + n - 1}"
    low, high = np.asarray(space.low).reshape(-1), np.asarray(space.high).reshape(-1)
    same = low.size and np.all(low == low[0]) and np.all(high == high[0])
    bounds = f" [{low[0]:g}, {high[0]:g}]" if same else ""
    return f"float32 [B, {low.size}] in the env's Box{bounds}"


def _cmd_plot(args: argparse.Namespace) -> int:
    from wheeler2.plot import plot_runs

    try:
        out = plot_runs(args.run_dirs, args.output, x=args.x)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {out}")
    return EXIT_OK


def _cmd_report(args: argparse.Namespace) -> int:
    from wheeler2.report import write_report

    report = write_report(
        args.dirs, args.output, by=args.by, threshold=args.threshold, resamples=args.resamples
    )
    print(report.markdown)
    print("wrote " + ", ".join(str(p) for p in report.files))
    return EXIT_OK


def _cmd_tune(args: argparse.Namespace) -> int:
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise UsageError("tune needs Optuna: pip install 'wheeler2[tune]'") from None
    from wheeler2.tune import tune

    for flag, value in (("--trials", args.trials), ("--parallel", args.parallel)):
        if value is not None and value < 1:
            raise UsageError(f"{flag}: expected an integer >= 1, got {value}")
    out = None if args.out is None else Path(args.out)
    try:
        tune(
            args.file, trials=args.trials, parallel=args.parallel, out=out, overrides=args.overrides
        )
    except KeyboardInterrupt:
        print("\nthe study keeps its finished trials: the same command goes on", file=sys.stderr)
        raise
    return EXIT_OK


COMMANDS = {
    "run": _cmd_run,
    "check": _cmd_check,
    "eval": _cmd_eval,
    "export": _cmd_export,
    "resume": _cmd_resume,
    "plot": _cmd_plot,
    "report": _cmd_report,
    "tune": _cmd_tune,
}


def main(argv: Sequence[str] | None = None) -> int:
    from wheeler2.process import mark_command_start

    # Without argv this process is the command (the console script): its start counts.
    mark_command_start(at_process_start=argv is None)
    try:
        # Parsed before anything heavy is imported: --help and usage errors answer at once.
        args = build_parser().parse_args(argv)
        if args.command in ("run", "resume"):
            from wheeler2.preload import start_early

            # Before this process imports torch: the members' fork server imports it meanwhile.
            start_early(
                args.command, args.file if args.command == "run" else args.run_dir, args.overrides
            )
        from wheeler2.checkpoint import CheckpointError
        from wheeler2.config import ConfigError
        from wheeler2.runtime.experiment import MemberFailed
    except KeyboardInterrupt:  # Ctrl-C before the command starts: while torch is imported, the
        # fork server is started or the parser reads the package's metadata (a slow start on a
        # busy machine), which would otherwise end in a traceback
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    try:
        return COMMANDS[args.command](args)
    except (ConfigError, UsageError, CheckpointError) as exc:  # CheckpointError: eval, resume
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except MemberFailed as exc:
        # The coordinator already printed the member's own traceback; ours adds nothing.
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Exception:  # noqa: BLE001 - anything else is a bug: show where it happened
        traceback.print_exc()
        return EXIT_ERROR

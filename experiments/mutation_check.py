"""Mutation check: do the fast unit tests notice when the buffer or an algorithm is broken?

One mutant at a time: a comparison flipped (``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=``),
an arithmetic operator swapped (``+`` <-> ``-``, ``*`` <-> ``/``, ``//`` -> ``/``, ``**`` -> ``*``),
a unary minus dropped, or a small numeric constant changed (``0`` -> ``1``, ``n`` -> ``n + 1``,
``x`` -> ``2 x``), in a function body of ``wheeler2/buffer/*.py`` or ``agents/*.py``. For each
mutant the unit tests that cover the file (``TESTS`` below) run with ``-x``; a failing run (or
one past the per-mutant timeout) kills the mutant, a passing one lets it survive.

Everything happens in a copy of the tree under ``/tmp`` (``--workdir``): the mutated file is
rewritten there and restored after each run, and the copy is deleted at the end, so the source
tree is never mutated, even when the check is interrupted. Run from the repository root::

    nice -n 10 .venv/bin/python -m experiments.mutation_check --per-file 40 --budget-min 25

Mutants are drawn at random (``--seed``) up to ``--per-file`` per file and run round robin
across files until ``--budget-min`` is spent, so a short budget still samples every file.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tokenize
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The light gate and lifecycle tests (the multi-process ones take 5-30 s each, too slow here).
GATE = [
    "tests/test_buffer_gate.py::test_learner_times_out_clearly_without_producers",
    "tests/test_buffer_gate.py::test_serial_writer_never_blocks_on_its_own_learner",
    "tests/test_buffer_gate.py::test_blocking_writer_waits_for_the_learner_and_times_out_clearly",
    "tests/test_buffer_gate.py::test_learner_starts_at_exactly_min_size_and_counts_its_updates",
    "tests/test_buffer_gate.py::test_learner_waits_for_a_late_insert_instead_of_timing_out",
    "tests/test_buffer_gate.py::test_producers_may_insert_up_to_exactly_the_tolerance_ahead",
    "tests/test_buffer_gate_rules.py",
]
REDRAW = [
    "tests/test_buffer_concurrent.py::test_rows_overwritten_between_draw_and_gather_are_redrawn"
]
CKPT = ["tests/test_buffer_lifecycle.py::test_checkpoint_round_trip_through_weights_only_load"]
# The off-policy learners' unit tests on tiny nets, the feed-forward and the recurrent ones; the
# runs through the CLI or the engine (15-30 s each) are left out. pytest takes one -k for all
# the files of a run, so the names cover every file these lists are used with.
UNIT_ONLY = [
    "-k",
    "not (through_the_cli or team_ppo or her_on_a_goal or a_short_run or own_share "
    "or through_the_engine or explorer_in_a_team)",
]
RECURRENT_OFFPOLICY = "tests/test_recurrent_offpolicy.py"

# file -> the fast unit tests that cover it (each must pass on the unmutated tree).
TESTS: dict[str, list[str]] = {
    "wheeler2/buffer/sumtree.py": ["tests/test_buffer_sumtree.py", "tests/test_buffer_sampling.py"],
    "wheeler2/buffer/sampler.py": [
        "tests/test_buffer_sampling.py",
        "tests/test_buffer_sumtree.py",
        "tests/test_trainer.py",
        *REDRAW,
    ],
    "wheeler2/buffer/storage.py": [
        "tests/test_buffer_storage.py",
        "tests/test_buffer_nstep.py",
        "tests/test_buffer_sampling.py",
        "tests/test_buffer_her.py",
        "tests/test_buffer_wraparound.py",
        *CKPT,
    ],
    "wheeler2/buffer/nstep.py": ["tests/test_buffer_nstep.py", "tests/test_buffer_her.py"],
    "wheeler2/buffer/her.py": ["tests/test_buffer_her.py"],
    # The compiled kernels. numba's disk cache (cache=True, in the copy's __pycache__) is keyed
    # by a hash of the source file's bytes (numba 0.68, caching._hash_source_file), so a mutant
    # is always compiled afresh (each pays the compile) and the restored file finds the
    # baseline's code again; the JIT cannot be turned off (treejit.py refuses NUMBA_DISABLE_JIT).
    "wheeler2/buffer/treejit.py": ["tests/test_buffer_sumtree.py", "tests/test_buffer_sampling.py"],
    "wheeler2/buffer/herjit.py": ["tests/test_buffer_her.py"],
    "wheeler2/buffer/writer.py": [
        "tests/test_buffer_writer.py",
        "tests/test_buffer_storage.py",
        "tests/test_buffer_nstep.py",
        "tests/test_buffer_her.py",
        "tests/test_buffer_sampling.py",
        "tests/test_buffer_wraparound.py",
        *GATE,
    ],
    "wheeler2/buffer/replay.py": [
        "tests/test_buffer_sampling.py",
        "tests/test_buffer_sequence.py",
        "tests/test_buffer_nstep.py",
        "tests/test_buffer_her.py",
        "tests/test_trainer.py",
        *GATE,
        *CKPT,
        *REDRAW,
    ],
    "wheeler2/buffer/gate.py": GATE,
    "agents/ddpg.py": ["tests/test_ddpg.py"],
    "agents/dqn.py": ["tests/test_dqn.py"],
    "agents/ppo.py": ["tests/test_ppo.py"],
    "agents/a2c.py": ["tests/test_a2c.py", "tests/test_td_lambda.py"],
    "agents/td3.py": ["tests/test_td3.py", RECURRENT_OFFPOLICY, *UNIT_ONLY],
    "agents/sac.py": ["tests/test_sac.py", RECURRENT_OFFPOLICY, *UNIT_ONLY],
    # The optimizer steps DDPG, TD3 and SAC share.
    "agents/offpolicy.py": [
        "tests/test_ddpg.py",
        "tests/test_td3.py",
        "tests/test_sac.py",
        RECURRENT_OFFPOLICY,
        *UNIT_ONLY,
    ],
    "agents/pg.py": ["tests/test_pg.py", *UNIT_ONLY],
    "agents/returns.py": ["tests/test_td_lambda.py", "tests/test_ppo.py"],
    "agents/normalize.py": ["tests/test_normalize.py"],
}

COMPARE = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}
ARITH = {"+": "-", "-": "+", "*": "/", "/": "*", "//": "/", "**": "*", "%": "*"}
AUG = {"+=": "-=", "-=": "+=", "*=": "/=", "/=": "*="}


@dataclass
class Mutant:
    file: str
    line: int
    col: int
    old: str
    new: str
    end_col: int  # on the same line as ``col``

    def label(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}: {self.old} -> {self.new or '(removed)'}"


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(source).readline))


def _op_between(toks, start: tuple[int, int], end: tuple[int, int], wanted: dict[str, str]):
    """The first operator token of ``wanted`` lying between two source positions."""
    for t in toks:
        if t.type == tokenize.OP and start <= t.start and t.end <= end and t.string in wanted:
            return t
    return None


def _constant(value: float) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return str(value + 1) if value != 1 else "0"
    if value == 0.0:
        return "1.0"
    return repr(value * 2)


def find_mutants(rel: str) -> list[Mutant]:
    source = (ROOT / rel).read_text()
    tree = ast.parse(source)
    toks = _tokens(source)
    out: list[Mutant] = []

    def add(tok, new: str) -> None:
        if tok is not None and tok.start[0] == tok.end[0]:
            out.append(Mutant(rel, tok.start[0], tok.start[1], tok.string, new, tok.end[1]))

    bodies = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    seen: set[tuple[int, int]] = set()
    for fn in bodies:
        for stmt in fn.body:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Compare):
                    prev = node.left
                    for comp in node.comparators:
                        tok = _op_between(
                            toks,
                            (prev.end_lineno, prev.end_col_offset),
                            (comp.lineno, comp.col_offset),
                            COMPARE,
                        )
                        if tok is not None and tok.start not in seen:
                            seen.add(tok.start)
                            add(tok, COMPARE[tok.string])
                        prev = comp
                elif isinstance(node, ast.BinOp):
                    tok = _op_between(
                        toks,
                        (node.left.end_lineno, node.left.end_col_offset),
                        (node.right.lineno, node.right.col_offset),
                        ARITH,
                    )
                    if tok is not None and tok.start not in seen:
                        seen.add(tok.start)
                        add(tok, ARITH[tok.string])
                elif isinstance(node, ast.AugAssign):
                    tok = _op_between(
                        toks,
                        (node.target.end_lineno, node.target.end_col_offset),
                        (node.value.lineno, node.value.col_offset),
                        AUG,
                    )
                    if tok is not None and tok.start not in seen:
                        seen.add(tok.start)
                        add(tok, AUG[tok.string])
                elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
                    tok = _op_between(
                        toks,
                        (node.lineno, node.col_offset),
                        (node.operand.lineno, node.operand.col_offset),
                        {"-": ""},
                    )
                    if tok is not None and tok.start not in seen:
                        seen.add(tok.start)
                        add(tok, "")
                elif isinstance(node, ast.Constant) and node.lineno == node.end_lineno:
                    new = _constant(node.value)
                    key = (node.lineno, node.col_offset)
                    if new is not None and key not in seen:
                        seen.add(key)
                        line = source.splitlines()[node.lineno - 1]
                        old = line[node.col_offset : node.end_col_offset]
                        out.append(
                            Mutant(rel, node.lineno, node.col_offset, old, new, node.end_col_offset)
                        )
    # keep only mutants that still compile (e.g. never ``f(/args)``)
    good = []
    for m in out:
        try:
            compile(apply(source, m), rel, "exec")
        except SyntaxError:
            continue
        good.append(m)
    return good


def apply(source: str, m: Mutant) -> str:
    lines = source.splitlines(keepends=True)
    line = lines[m.line - 1]
    lines[m.line - 1] = line[: m.col] + m.new + line[m.end_col :]
    return "".join(lines)


def run_tests(work: Path, tests: list[str], timeout: float) -> str:
    """'pass', 'fail' or 'timeout' for the tests run in the copy ``work``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(work)  # the copy's modules, not the editable install's
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a same-size mutant must never reuse a stale .pyc
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        proc = subprocess.run(
            cmd,
            cwd=work,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return "timeout"
    return "pass" if proc.returncode == 0 else "fail"


def copy_tree(dst: Path) -> None:
    ignore = shutil.ignore_patterns(
        ".venv", ".git", "__pycache__", "runs", "results", ".ruff_cache", "*.pt", "*.egg-info"
    )
    shutil.copytree(ROOT, dst, ignore=ignore, dirs_exist_ok=True)
    # The installed layout (setup.cfg package_dir): without these links wheeler2.agents would
    # come from the editable install, the unmutated code.
    for folder in ("agents", "envs", "tasks"):
        link = dst / "wheeler2" / folder
        if not link.exists():
            link.symlink_to(Path("..") / folder)


def check_imports_copy(work: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(work), PYTHONDONTWRITEBYTECODE="1")
    code = (
        "import wheeler2.buffer.replay as r, wheeler2.agents.ddpg as d; "
        "print(r.__file__, d.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    for path in out:
        if not Path(path).resolve().is_relative_to(work.resolve()):
            raise SystemExit(f"the copy is not what gets imported: {path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", nargs="*", default=list(TESTS), help="files to mutate")
    ap.add_argument("--per-file", type=int, default=40, help="mutants drawn per file at most")
    ap.add_argument("--budget-min", type=float, default=25.0, help="stop starting mutants after")
    ap.add_argument("--timeout", type=float, default=0.0, help="per mutant (0: 3x the baseline)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None, help="where to copy the tree (default: a tempdir)")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--list", action="store_true", help="only count the mutants per file")
    args = ap.parse_args()

    pools: dict[str, list[Mutant]] = {}
    for rel in args.files:
        found = find_mutants(rel)
        # One generator per file: a file's draw does not depend on which other files run.
        random.Random(f"{args.seed}:{rel}").shuffle(found)
        pools[rel] = found[: args.per_file]
        print(f"{rel}: {len(found)} mutants, {len(pools[rel])} drawn", flush=True)
    if args.list:
        return 0

    work = Path(args.workdir or tempfile.mkdtemp(prefix="w2-mutation-"))
    if work.resolve() == ROOT or ROOT.resolve().is_relative_to(work.resolve()):
        raise SystemExit("--workdir must not be the source tree")

    def _interrupted(signum, frame):  # noqa: ANN001, ARG001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _interrupted)
    results: dict[str, dict] = {}
    started = time.monotonic()
    try:
        copy_tree(work)
        check_imports_copy(work)
        timeouts: dict[str, float] = {}
        for rel in args.files:
            t0 = time.monotonic()
            status = run_tests(work, TESTS[rel], timeout=900)
            took = time.monotonic() - t0
            results[rel] = {"killed": 0, "survived": [], "timeout": 0, "baseline_s": round(took, 1)}
            if status != "pass":
                print(f"{rel}: baseline tests {status}; file skipped", flush=True)
                results[rel]["skipped"] = f"baseline {status}"
                pools[rel] = []
                continue
            timeouts[rel] = args.timeout or max(3 * took, 20.0)
            print(f"{rel}: baseline {took:.1f} s", flush=True)
        originals = {rel: (work / rel).read_text() for rel in args.files}
        queue = [m for round_ in _round_robin(pools) for m in round_]
        for m in queue:
            if time.monotonic() - started > args.budget_min * 60:
                print("budget spent", flush=True)
                break
            target = work / m.file
            target.write_text(apply(originals[m.file], m))
            try:
                status = run_tests(work, TESTS[m.file], timeouts[m.file])
            finally:
                target.write_text(originals[m.file])
            res = results[m.file]
            if status == "pass":
                res["survived"].append(asdict(m) | {"label": m.label()})
            else:
                res["killed"] += 1
                res["timeout"] += status == "timeout"
            print(f"{'SURVIVED' if status == 'pass' else 'killed  '} {m.label()}", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    report(results, time.monotonic() - started)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def _round_robin(pools: dict[str, list[Mutant]]):
    depth = max((len(p) for p in pools.values()), default=0)
    for i in range(depth):
        yield [p[i] for p in pools.values() if i < len(p)]


def report(results: dict[str, dict], seconds: float) -> None:
    print(f"\n## mutation score ({seconds / 60:.1f} min)\n")
    print("| file | killed | survived | score |")
    print("| --- | --- | --- | --- |")
    tk = ts = 0
    for rel, r in results.items():
        k, s = r["killed"], len(r["survived"])
        tk, ts = tk + k, ts + s
        score = f"{100 * k / (k + s):.0f}%" if k + s else r.get("skipped", "-")
        print(f"| {rel} | {k} | {s} | {score} |")
    if tk + ts:
        print(f"| total | {tk} | {ts} | {100 * tk / (tk + ts):.0f}% |")
    print("\nsurvivors:")
    for r in results.values():
        for s in r["survived"]:
            print(f"  {s['label']}")


if __name__ == "__main__":
    sys.exit(main())

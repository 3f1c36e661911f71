"""``python -m experiments``: rebuild result files from their stored runs, or list them.

python -m experiments regen experiments/results/team_vs_solo_pendulum.md [more ...]
python -m experiments regen --all        # every generated file under experiments/results/
python -m experiments list               # which files are generated, and from what
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.lib import RESULTS, ROOT, report


def _path(arg: str) -> Path:
    """A result file named from the repository root, the working directory or results/."""
    for candidate in (Path(arg), ROOT / arg, ROOT / "experiments" / arg, RESULTS / arg):
        if candidate.is_file():
            return candidate
    raise SystemExit(f"{arg}: no such result file")


def generated() -> list[tuple[Path, dict | None]]:
    """Every markdown file under results/ with its regen header (None: not generated)."""
    out = []
    for path in sorted(RESULTS.rglob("*.md")):
        try:
            out.append((path, report.read_meta(path)))
        except report.NotGenerated:
            out.append((path, None))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m experiments",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="command", required=True)
    regen = sub.add_parser("regen", help="rebuild result files from their stored runs")
    regen.add_argument("files", nargs="*")
    regen.add_argument("--all", action="store_true", help="every generated file")
    sub.add_parser("list", help="result files: generated (and from which runs) or not")
    args = ap.parse_args(argv)
    if args.command == "list":
        for path, meta in generated():
            what = (
                "hand-written or not regenerable"
                if meta is None
                else (f"{meta['module']}, runs {meta.get('runs') or '(none)'}")
            )
            print(f"{report.shown(path)}: {what}")
        return 0
    paths = [p for p, meta in generated() if meta] if args.all else [_path(f) for f in args.files]
    if not paths:
        ap.error("regen: name result files, or --all")
    failed = 0
    for path in paths:
        try:
            report.regenerate(path)
            print(f"rebuilt {report.shown(path)}")
        except report.NotGenerated as exc:
            print(f"error: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

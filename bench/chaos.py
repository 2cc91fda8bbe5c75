"""lanebot's reliability as figures: runs through the real stack under faults, and what GitHub shows after.

Through bot/demo/stack.py (the sandbox GitHub and `lanebot serve` as processes), with the demo's
four-unit plan (bot/demo/plan.py, written by hand in the issue; recipe agents, no model), each case
injects its fault, lets every run finish (each step bounded, `--step-timeout`), and then counts
(tests/e2e/chaos_cases.py):

- runs completed: ended in exactly one pull request, labelled `lanebot:done`;
- extra PRs, duplicate comments (two of lanebot's comments with one hidden marker), duplicate labels
  (a label twice, or two state labels at the end), duplicate check runs (same name, head and
  external id), lanes merged more than once (a `Merge lane` subject twice on the integration branch);
- deliveries lost: answered 2xx but not stored, stored but never processed, or shown failed by
  GitHub and never stored.

Cases (`--cases`, comma-separated; default all):

- `errors`: 10% of lanebot's API requests answered 502 (4%), 500 (3%), or a secondary rate limit
  (403 and 429, 1.5% each, `Retry-After: 1`), drawn at random with a seed, over `--runs` runs;
- `errors-repeatable`: the same, but the 5xx only on the requests lanebot's client may repeat;
- `sigkill`: lanebot SIGKILLed once per run, the points taken in turn (planning, lanes, merge,
  integrate, PR creation) at a random moment inside each, then restarted, over `--runs` runs;
- `concurrent`: one delivery sent 20 times at once (the labelled one, then the `/approve` one),
  and `/approve` from 20 maintainers at once;
- `postgres`: lanebot on a throwaway PostgreSQL database (`--postgres`, created and dropped); its
  connections terminated with pg_terminate_backend at a random moment of each run (the shared
  server is not restarted), over `--pg-runs` runs;
- `disk`: LANEBOT_WORKDIR on a 64 MB tmpfs, filled while a lane's check runs, freed 3 s later;
- `lock`: another connection holds SQLite's write lock for 12 s while an issue is opened and
  labelled; then `lanebot deliveries recover`.

    .venv/bin/python bench/chaos.py [--runs 10] [--pg-runs 3] [--cases errors,sigkill] [--seed 1]

Prints a Markdown table and the notes of each case (what went wrong, where). Not a test: the
figures depend on timing; exit status 1 when any case was not clean.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e import chaos_cases as cases  # noqa: E402

CASES = ("errors", "errors-repeatable", "sigkill", "concurrent", "postgres", "disk", "lock")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="runs for the errors and sigkill cases (default 10)")
    parser.add_argument("--pg-runs", type=int, default=3, help="runs for the postgres case (default 3)")
    parser.add_argument(
        "--cases", default=",".join(CASES), help=f"which cases, comma-separated (default all: {','.join(CASES)})"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--postgres", default=cases.POSTGRES_SERVER, help="the PostgreSQL server (its own database is not touched)"
    )
    parser.add_argument(
        "--step-timeout", type=float, default=120.0, help="seconds for each step of a run (default 120)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the stacks' folders (logs) and print where")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.cases.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    cases.STEP_TIMEOUT = args.step_timeout
    cases.POSTGRES_SERVER = args.postgres

    work = Path(tempfile.mkdtemp(prefix="lanebot-chaos-"))
    started = datetime.now(UTC)
    tallies: list[cases.Tally] = []
    for name in chosen:
        root = work / name
        clock = time.monotonic()
        print(f"… {name}", file=sys.stderr, flush=True)
        tally = run_case(name, root, args)
        tally.seconds = time.monotonic() - clock
        tallies.append(tally)
        print(
            f"  {name}: {tally.completed}/{tally.runs} completed in {tally.seconds:.0f} s", file=sys.stderr, flush=True
        )

    command = "python bench/chaos.py " + " ".join(argv if argv is not None else sys.argv[1:])
    print(f"## Reliability under faults ({started:%Y-%m-%d %H:%M} UTC)\n")
    print(f"`{command.strip()}` on {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}\n")
    print(cases.table(tallies))
    for tally in tallies:
        print(f"\n### {tally.case}\n")
        for note in tally.notes or ["(nothing to note)"]:
            print(f"- {note}")
    if args.keep:
        print(f"\nThe stacks' folders: {work}", file=sys.stderr)
    else:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(t.clean for t in tallies) else 1


def run_case(name: str, root: Path, args: argparse.Namespace) -> cases.Tally:
    try:
        if name == "errors":
            return cases.github_errors(root, args.runs, seed=args.seed)
        if name == "errors-repeatable":
            faults = cases.ten_percent(args.seed, server_errors_on="repeatable")
            return cases.github_errors(
                root,
                args.runs,
                seed=args.seed,
                faults=faults,
                case="the same 10%, the 5xx only on requests lanebot may repeat",
            )
        if name == "sigkill":
            return cases.sigkill(root, args.runs, seed=args.seed)
        if name == "concurrent":
            return cases.concurrent(root)
        if name == "postgres":
            return cases.postgres_cut(root, args.pg_runs, seed=args.seed)
        if name == "disk":
            return cases.disk_full(root)
        return cases.sqlite_lock(root)
    except Exception as error:  # a case that cannot run is reported, the others still run
        tally = cases.Tally(name)
        tally.notes.append(f"the case could not run: {type(error).__name__}: {error}")
        return tally


if __name__ == "__main__":
    sys.exit(main())

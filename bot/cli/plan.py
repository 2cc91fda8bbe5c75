"""`lanebot plan check|show|simulate`: look at a plan file before any agent runs it."""

from __future__ import annotations

import argparse
from pathlib import Path

from bot.cli import UsageError
from bot.core import graph as unit_graph
from bot.core.graph import Graph, InvalidPlan, PlanSyntaxError
from bot.core.scheduler import simulate
from bot.core.workflow import Workflow, WorkflowError, parse_yaml
from bot.edges.workflow_files import load_workflow


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    plan = subparsers.add_parser("plan", help="check, show or simulate a unit graph (JSONL or a JSON array)")
    commands = plan.add_subparsers(dest="plan_command", metavar="ACTION", required=True)

    check = commands.add_parser("check", help="print every problem of a plan; exit 1 when there is one")
    _plan_arguments(check)
    check.set_defaults(func=run_check)

    show = commands.add_parser("show", help="print the units, rounds, critical path and session bound")
    _plan_arguments(show)
    show.add_argument(
        "--config", type=Path, metavar="FILE", help="a repository's .github/lanebot.yml, for the session bound"
    )
    show.set_defaults(func=run_show)

    sim = commands.add_parser("simulate", help="print the makespan of a plan under a schedule")
    _plan_arguments(sim)
    sim.add_argument("--schedule", choices=("barrier", "eager", "sequential"), default="barrier")
    sim.add_argument(
        "--durations", metavar="ID=MIN,...", default="", help="minutes per unit; units not named use their estimate"
    )
    sim.add_argument("--max-lanes", type=int, metavar="N", help="lanes at once (default: unlimited)")
    sim.set_defaults(func=run_simulate)


def _plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE", help="the plan: JSONL, or a JSON array of units")
    parser.add_argument(
        "--tracked-paths",
        type=Path,
        metavar="FILE",
        help="the repository's tracked paths, one per line (e.g. `git ls-files`), to check that files do not overlap",
    )
    parser.add_argument("--max-units", type=int, default=unit_graph.DEFAULT_MAX_UNITS, metavar="N")


def run_check(args: argparse.Namespace) -> int:
    raw = _read_units(args.file)
    problems = unit_graph.validate(raw, max_units=args.max_units, tracked_paths=_tracked_paths(args))
    if problems:
        for problem in problems:
            print(problem)
        print(f"{len(problems)} problem{'s' if len(problems) != 1 else ''} in {args.file}")
        return 1
    graph = unit_graph.build_graph(raw, max_units=args.max_units)
    print(f"{args.file}: {len(graph)} units in {len(graph.rounds())} rounds, no problems")
    return 0


def run_show(args: argparse.Namespace) -> int:
    graph = _load_graph(args)
    if graph is None:
        return 1
    budget = _workflow(args.config).session_budget()
    print(f"{len(graph)} units")
    for unit in graph:
        needs = ", ".join(unit.needs) or "-"
        estimate = f"{unit.estimate:g} min" if unit.estimate is not None else "no estimate"
        print(f"  {unit.id}: {unit.title}")
        print(f"      needs: {needs}; files: {unit.files}; {estimate}")
        print(f"      check: {unit.check}")
    print("rounds")
    for number, round_units in enumerate(graph.rounds(), start=1):
        print(f"  {number}. {', '.join(round_units)}")
    critical = graph.critical_path()
    line = " -> ".join(critical.units)
    if critical.minutes is not None:
        line += f" ({critical.minutes:g} min; sequential {graph.sequential_minutes():g} min)"
    print(f"critical path: {line}")
    print(f"session bound: up to {graph.session_bound(budget)} agent sessions")
    return 0


def run_simulate(args: argparse.Namespace) -> int:
    graph = _load_graph(args)
    if graph is None:
        return 1
    if args.max_lanes is not None and args.max_lanes < 1:
        raise UsageError("--max-lanes must be at least 1")
    durations = _durations(args.durations, graph)
    try:
        result = simulate(graph, durations, args.schedule, args.max_lanes)
    except ValueError as error:
        raise UsageError(f"{error}; give --durations id=minutes for each of them") from None
    print(f"makespan: {result.makespan:g} min ({args.schedule})")
    for span in result.spans:
        print(f"  {span.unit}: round {span.round + 1}, {span.start:g} -> {span.end:g} min, merged at {span.merged:g}")
    return 0


def _read_units(path: Path) -> list[object]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read {path}: {error}") from None
    try:
        return unit_graph.parse_units(text)
    except PlanSyntaxError as error:
        raise UsageError(f"{path}: {error}") from None


def _tracked_paths(args: argparse.Namespace) -> list[str]:
    if args.tracked_paths is None:
        return []
    try:
        lines = args.tracked_paths.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read --tracked-paths {args.tracked_paths}: {error}") from None
    return [line for line in lines if line.strip()]


def _load_graph(args: argparse.Namespace) -> Graph | None:
    raw = _read_units(args.file)
    try:
        return unit_graph.build_graph(raw, max_units=args.max_units, tracked_paths=_tracked_paths(args))
    except InvalidPlan as error:
        for problem in error.problems:
            print(problem)
        return None


def _workflow(config: Path | None) -> Workflow:
    try:
        if config is None:
            return load_workflow()
        try:
            text = config.read_text(encoding="utf-8")
        except OSError as error:
            raise UsageError(f"cannot read --config {config}: {error}") from None
        return load_workflow([(str(config), parse_yaml(text, str(config)))])
    except WorkflowError as error:
        raise UsageError("; ".join(error.problems)) from None


def _durations(text: str, graph: Graph) -> dict[str, float]:
    durations: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        unit_id, sep, minutes = item.partition("=")
        if not sep:
            raise UsageError(f"--durations: {item!r} is not id=minutes")
        if unit_id not in graph.ids:
            raise UsageError(f"--durations: {unit_id!r} names no unit (units: {', '.join(graph.ids)})")
        try:
            value = float(minutes)
        except ValueError:
            raise UsageError(f"--durations: {minutes!r} for {unit_id} is not a number of minutes") from None
        if not value >= 0 or value == float("inf"):
            raise UsageError(f"--durations: {unit_id} needs a finite, non-negative number of minutes")
        durations[unit_id] = value
    for unit in graph:
        if unit.id not in durations and unit.estimate is not None:
            durations[unit.id] = unit.estimate
    return durations

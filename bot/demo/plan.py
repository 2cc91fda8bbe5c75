"""The demo's hand-written plan: four units shaped like the worked example, one `needs` edge.

Each brief carries its files verbatim in fenced blocks with a `path=` attribute, so the `recipe`
agent can apply them: no model is needed. The plan goes into the issue body as a `lanebot-plan`
block, which lanebot validates and uses without a planner session.
"""

from __future__ import annotations

import json

FENCE = "```"


def _brief(summary: str, files: dict[str, str]) -> str:
    blocks = [f"{FENCE}python path={path}\n{content}{FENCE}" for path, content in files.items()]
    return "\n\n".join([summary, *blocks])


MIGRATION = {
    "migrations/0002_status.py": (
        '"""Every task gets a status; tasks written before it are still to do."""\n\n\n'
        "def upgrade(task):\n"
        '    task.setdefault("status", "todo")\n'
        "    return task\n"
    ),
    "tests/test_migrations.py": (
        "import unittest\n\n"
        "from migrations import apply_all\n\n\n"
        "class StatusMigrationTest(unittest.TestCase):\n"
        "    def test_old_tasks_are_todo(self):\n"
        '        self.assertEqual(apply_all({"id": 1, "title": "x"})["status"], "todo")\n\n'
        "    def test_a_status_is_kept(self):\n"
        '        self.assertEqual(apply_all({"id": 1, "title": "x", "status": "done"})["status"], "done")\n'
    ),
}

TUI = {
    "tasks/tui.py": (
        '"""The terminal view: one row per task, with its status when it has one."""\n\n'
        "from tasks.store import all_tasks\n\n\n"
        "def rows():\n"
        "    return [f\"{task['id']:>3}  {task.get('status', '-'):<5} {task['title']}\" for task in all_tasks()]\n"
    ),
    "tests/test_tui.py": (
        "import unittest\n\n"
        "from tasks.tui import rows\n\n\n"
        "class RowsTest(unittest.TestCase):\n"
        "    def test_one_row_per_task_with_its_title(self):\n"
        "        lines = rows()\n"
        "        self.assertEqual(len(lines), 2)\n"
        '        self.assertTrue(lines[0].endswith("Write the README"))\n'
    ),
}

API = {
    "tasks/api.py": (
        '"""The JSON API: what GET /tasks answers, status included."""\n\n'
        "from tasks.store import all_tasks\n\n\n"
        "def get_tasks():\n"
        '    return [{"id": t["id"], "title": t["title"], "status": t["status"]} for t in all_tasks()]\n'
    ),
    "tests/test_api.py": (
        "import unittest\n\n"
        "from tasks.api import get_tasks\n\n\n"
        "class GetTasksTest(unittest.TestCase):\n"
        "    def test_every_task_has_a_status(self):\n"
        '        self.assertEqual({task["status"] for task in get_tasks()}, {"todo"})\n'
    ),
}

CLI = {
    "tasks/cli.py": (
        '"""The command line: `tasks list [--status STATUS]`."""\n\n'
        "import argparse\n\n"
        "from tasks.store import all_tasks\n\n\n"
        "def main(argv=None):\n"
        '    parser = argparse.ArgumentParser(prog="tasks")\n'
        '    parser.add_argument("command", choices=["list"])\n'
        '    parser.add_argument("--status", help="only tasks with this status")\n'
        "    args = parser.parse_args(argv)\n"
        "    tasks = all_tasks()\n"
        "    if args.status:\n"
        '        tasks = [task for task in tasks if task.get("status") == args.status]\n'
        '    return [task["title"] for task in tasks]\n'
    ),
    "tests/test_cli.py": (
        "import unittest\n\n"
        "from tasks.cli import main\n\n\n"
        "class ListTest(unittest.TestCase):\n"
        "    def test_list_shows_every_title(self):\n"
        '        self.assertEqual(main(["list"]), ["Write the README", "Ship version 1"])\n\n'
        "    def test_an_unknown_status_lists_nothing(self):\n"
        '        self.assertEqual(main(["list", "--status", "someday"]), [])\n'
    ),
}


def _unit(
    unit_id: str,
    title: str,
    needs: list[str],
    files: str,
    test_module: str,
    estimate: int,
    summary: str,
    contents: dict[str, str],
) -> dict[str, object]:
    return {
        "id": unit_id,
        "title": title,
        "needs": needs,
        "files": files,
        "check": f"python3 -m unittest -q {test_module}",
        "brief": _brief(summary, contents),
        "estimate": estimate,
    }


UNITS = [
    _unit(
        "migration",
        "Add a status to every task",
        [],
        r"^(migrations/0002_status\.py|tests/test_migrations\.py)$",
        "tests.test_migrations",
        10,
        "Add migration 0002 giving every task a status, `todo` unless it has one.",
        MIGRATION,
    ),
    _unit(
        "tui-rows",
        "Show the status in the terminal rows",
        [],
        r"^(tasks/tui\.py|tests/test_tui\.py)$",
        "tests.test_tui",
        30,
        "Show each task's status in its row of the terminal view.",
        TUI,
    ),
    _unit(
        "api-endpoint",
        "Return the status from GET /tasks",
        ["migration"],
        r"^(tasks/api\.py|tests/test_api\.py)$",
        "tests.test_api",
        15,
        "Return each task's status from the API; the migration guarantees there is one.",
        API,
    ),
    _unit(
        "cli-flag",
        "Add --status to tasks list",
        [],
        r"^(tasks/cli\.py|tests/test_cli\.py)$",
        "tests.test_cli",
        5,
        "Add a --status filter to `tasks list`.",
        CLI,
    ),
]


def plan_jsonl() -> str:
    return "".join(json.dumps(unit) + "\n" for unit in UNITS)


def issue_body() -> str:
    return (
        "Tasks need a status: stored by a migration, returned by the API, shown in the terminal "
        "rows, and filterable from the command line.\n\n"
        "The plan is written by hand, so no planner agent is needed:\n\n"
        f"~~~lanebot-plan\n{plan_jsonl()}~~~\n"
    )

"""The terminal view: one row per task."""

from tasks.store import all_tasks


def rows():
    return [f"{task['id']:>3}  {task['title']}" for task in all_tasks()]

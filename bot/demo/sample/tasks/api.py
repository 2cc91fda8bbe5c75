"""The JSON API: what GET /tasks answers."""

from tasks.store import all_tasks


def get_tasks():
    return [{"id": task["id"], "title": task["title"]} for task in all_tasks()]

"""Each migration upgrades one task record; they run in file-name order."""

import importlib
import pkgutil


def apply_all(task):
    names = sorted(info.name for info in pkgutil.iter_modules(__path__) if info.name[0].isdigit())
    for name in names:
        task = importlib.import_module(f"migrations.{name}").upgrade(task)
    return task

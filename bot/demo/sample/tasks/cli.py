"""The command line: `tasks list`."""

import argparse

from tasks.store import all_tasks


def main(argv=None):
    parser = argparse.ArgumentParser(prog="tasks")
    parser.add_argument("command", choices=["list"])
    parser.parse_args(argv)
    return [task["title"] for task in all_tasks()]

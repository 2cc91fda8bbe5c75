"""The I/O adapters: settings, GitHub, git, the agents, the database, the executor, the workflow's files, the jail.

Each is a module or package of its own behind a small interface, and none imports another (an
import-linter contract in pyproject.toml): what joins them is a step in bot/runner. They may import
bot.core; nothing here decides what lanebot does, only how it reaches the world.
"""

"""Alembic migrations for lanebot's database (a package so that installs carry them)."""

"""The pure core: lanebot's decisions, with no I/O (no processes, sockets, files, clocks or event loop).

Everything here is a function of its arguments; time comes in as `now=`. The folders above
(render, edges, runner, web) may import it; it imports nothing of theirs (pyproject.toml's
import-linter contracts, and tests/core/test_purity.py, check that).
"""

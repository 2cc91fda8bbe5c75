"""lanebot: split an issue into a graph of work units and run them as parallel agent lanes."""

__version__ = "0.1.0"

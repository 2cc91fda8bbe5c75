"""A tiny task list: the sample project lanebot's demo works on."""

"""`lanebot demo`: the whole flow against the sandbox GitHub, with no model and no account."""

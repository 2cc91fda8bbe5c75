"""Review work on lanebot's pull request: the queue (one request at a time per pull request), fix lanes
for review feedback (fix), and lanebot's own review (own). Which step does which kind of request is
one table, bot.runner.jobs.REVIEW_STEPS, so that the queue never imports the steps that use it.
"""

"""The steps of a run: read the rows, ask bot.core what to do, act through bot.edges, write the rows.

Planning a run (plan, plan_session), building it (orchestrator, lanes, integrate), the review work on
its pull request (review/), tidying up after it (cleanup), and the background jobs that run them
(jobs, which also holds the table of review steps). A step receives its `context` as the narrow
interfaces of bot/runner/context.py. May import bot.edges, bot.render and bot.core.
"""

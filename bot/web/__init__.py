"""The front door: the Starlette app, the webhook intake, the dispatcher that hands stored deliveries to
the handlers (handlers/, one module per event family), the recovery of missed deliveries, and the App's
registration pages. May import bot.runner, bot.edges, bot.render and bot.core.
"""

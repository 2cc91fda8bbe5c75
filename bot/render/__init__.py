"""Pure text for GitHub: the gate comment, the progress comment, short answers, check-run reports,
the pull request's title and body, and the Jinja2 environments and templates that write them.

Imports only bot.core; does no I/O beyond reading its own templates, shipped in the package.
"""

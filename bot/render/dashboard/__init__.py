"""The dashboard's pure parts: the runs list's rows, the unit graph as SVG, a lane attempt's transcript
read for people, and links to GitHub. Pure, no I/O: rows and the transcript's bytes come in, text and
values go out; time comes in as `now=`.

The web side (bot/web/dashboard) reads the database and the transcript files and puts these into its
HTML templates, which escape everything they print; the SVG is the one piece of markup made here, and
`graph_svg` escapes every text it holds (bot.render.dashboard.markup).
"""

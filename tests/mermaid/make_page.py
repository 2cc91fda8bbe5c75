"""Write an HTML page that renders gate comments for plans with hostile titles, by hand.

Not part of `make test` (it needs a browser and Mermaid from npm); see README.md here.

    .venv/bin/python tests/mermaid/make_page.py [--out DIR] [--node-modules DIR]

writes DIR/gate-check.html (the page) and DIR/diagrams.json (the Mermaid sources, for
parse.mjs). The page renders each comment's Markdown with `marked` (GFM tables), draws each
Mermaid block with `mermaid.render`, runs `mermaid.parse` on it, and writes a summary at the
top: diagrams parsed, diagrams that drew Mermaid's "Syntax error" bomb, and whether any
payload ran (an `onerror` that sets `window.__pwned`) or left an element it should not have.
`gate-check.html?case=N` (N from 0) shows one case alone, for a screenshot of its diagram.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bot.core.graph import SessionBudget, build_graph
from bot.render.gate import render_gate

PAYLOAD = '<img src=x onerror="window.__pwned=(window.__pwned||0)+1">'

# Five sets of hostile titles (the node labels), each drawn as one small graph with a chain,
# so the critical path's classDef and linkStyle lines are exercised too.
HOSTILE_SETS: dict[str, list[str]] = {
    "quotes, brackets, script, backticks, pipes": [
        '"quotes" [brackets] <script>alert(1)</script> `backticks` | pipes',
        "a [square] (round) {curly} ((double)) [[sub]] >flag]",
        'trailing quote"',
    ],
    "Mermaid syntax injected into a label": [
        '"]; click u0 call alert(1); u9["',
        "%% a comment\nend\nsubgraph x",
        "style u0 fill:#f00; classDef y fill:#0f0; linkStyle 0 stroke:#00f;",
        "u0 --> u1 ==> u2 -.-> u3 --o u4 --x u5",
    ],
    "HTML and entities": [
        PAYLOAD,
        "&lt;b&gt;not bold&lt;/b&gt; &amp; &#60;i&#62; #quot; #35; #9829; #lt;",
        "<b>bold?</b> <a href='javascript:alert(1)'>link</a> <br> <!-- c -->",
    ],
    "Markdown": [
        "`**bold**` **bold** _it_ ~~strike~~ $x^2$ [link](javascript:alert(1))",
        "```mermaid\nflowchart LR\n```",
        "# heading\n- list item\n> quote\n| a | b |",
        "@octocat @acme/security #1 :tada:",
    ],
    "Unicode and Mermaid's own placeholders": [
        "émoji 😀 中文 עברית العربية",
        "bidi \u202eevil\u202c zero\u200bwidth tab\there",
        "ﬂ°°60¶ß ﬂ°lt¶ß placeholder look-alikes",
        "combining e\u0301 astral 𝔘 nul\x00 del\x7f",
    ],
}


def hostile_graph(titles: list[str]):
    units = []
    for index, title in enumerate(titles):
        units.append(
            {
                "id": f"unit-{index}",
                "title": title,
                "needs": [f"unit-{index - 1}"] if index else [],
                "files": f"^part{index}/",
                "check": f"echo '{title[:20]}' | grep -c ok",
                "brief": f"Work on {title}\n```\nclose the fence?\n```\n</details>",
                "estimate": 5 * (index + 1),
            }
        )
    return build_graph(units)


def gate_comments() -> dict[str, str]:
    budget = SessionBudget(planner_attempts=3, lane_attempts=3, verify_repairs=2)
    return {
        name: render_gate(
            run_id=1,
            revision=1,
            graph=hostile_graph(titles),
            budget=budget,
            state="awaiting_approval",
            issue_number=42,
            repository="acme/tasks",
            plan_source="agent",
            schedule="barrier",
            max_lanes=4,
            verify="make test",
        )
        for name, titles in HOSTILE_SETS.items()
    }


def mermaid_source(comment: str) -> str:
    return comment.split("```mermaid\n", 1)[1].split("\n```", 1)[0]


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>lanebot gate check</title>
<style>
body {{ font-family: sans-serif; margin: 16px; }}
section {{ border-top: 2px solid #888; margin-top: 16px; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 2px 6px; font-size: 12px; }}
.ok {{ color: #0a0; }} .bad {{ color: #c00; font-weight: bold; }}
</style>
<script src="{marked}"></script>
<script src="{mermaid}"></script>
</head><body>
<h1 id="summary">running…</h1>
<div id="cases"></div>
<script type="application/json" id="data">{data}</script>
<script>
(async () => {{
  const all = JSON.parse(document.getElementById('data').textContent);
  const only = new URLSearchParams(location.search).get('case');  // ?case=N shows one case
  const cases = only === null ? all : Object.fromEntries([Object.entries(all)[Number(only)]]);
  mermaid.initialize({{ startOnLoad: false, securityLevel: 'strict' }});
  let parsed = 0, bombs = 0, failures = [];
  let index = 0;
  for (const [name, comment] of Object.entries(cases)) {{
    const section = document.createElement('section');
    section.innerHTML = '<h2></h2><p class="result"></p><div class="comment"></div>';
    section.querySelector('h2').textContent = name;
    section.querySelector('.comment').innerHTML = marked.parse(comment, {{ gfm: true }});
    document.getElementById('cases').appendChild(section);
    for (const code of section.querySelectorAll('code.language-mermaid')) {{
      const text = code.textContent;
      const result = section.querySelector('.result');
      try {{
        await mermaid.parse(text);
        parsed += 1;
        result.innerHTML = '<span class="ok">mermaid.parse: ok</span>';
      }} catch (error) {{
        failures.push(name);
        result.innerHTML = '<span class="bad"></span>';
        result.firstChild.textContent = 'mermaid.parse failed: ' + error.message;
      }}
      try {{
        const {{ svg }} = await mermaid.render('diagram' + (index++), text);
        if (svg.includes('Syntax error')) bombs += 1;
        const holder = document.createElement('div');
        holder.innerHTML = svg;
        code.parentElement.replaceWith(holder);
      }} catch (error) {{
        bombs += 1;
      }}
    }}
  }}
  await new Promise((done) => setTimeout(done, 300));  // let any injected onerror fire
  const total = Object.keys(cases).length;
  const strays = document.querySelectorAll('#cases img, #cases script, #cases iframe, #cases a[href^="javascript"]').length;
  const summary = `parsed ${{parsed}}/${{total}}; syntax-error bombs ${{bombs}}; payloads run ${{window.__pwned || 0}}; stray elements ${{strays}}`;
  const ok = parsed === total && bombs === 0 && !window.__pwned && strays === 0;
  const heading = document.getElementById('summary');
  heading.textContent = (ok ? 'OK: ' : 'FAILED: ') + summary + (failures.length ? ' — ' + failures.join(', ') : '');
  heading.className = ok ? 'ok' : 'bad';
  document.title = heading.textContent;
}})();
</script>
</body></html>
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/mermaid-check"))
    parser.add_argument("--node-modules", type=Path, default=Path("/tmp/mermaid-check/node_modules"))
    arguments = parser.parse_args()
    comments = gate_comments()
    arguments.out.mkdir(parents=True, exist_ok=True)
    data = json.dumps(comments).replace("</", "<\\/")  # no `</script>` can end the data early
    page = PAGE.format(
        marked=html.escape((arguments.node_modules / "marked/lib/marked.umd.js").as_uri()),
        mermaid=html.escape((arguments.node_modules / "mermaid/dist/mermaid.min.js").as_uri()),
        data=data,
    )
    (arguments.out / "gate-check.html").write_text(page, encoding="utf-8")
    diagrams = {name: mermaid_source(comment) for name, comment in comments.items()}
    (arguments.out / "diagrams.json").write_text(json.dumps(diagrams, indent=1), encoding="utf-8")
    for name, comment in comments.items():
        (arguments.out / f"gate-{list(comments).index(name)}.md").write_text(comment, encoding="utf-8")
    print(arguments.out / "gate-check.html")


if __name__ == "__main__":
    main()

"""Whether a name is a valid git ref name: `git check-ref-format`'s rules, decided without a git
process (a lane checked its branch name with one before every worktree cut and every push).

The rules are those of git-check-ref-format(1) without `--allow-onelevel`, `--refspec-pattern`
or `--normalize`; tests/core/test_refnames.py holds them against git itself.
"""

from __future__ import annotations

import re

# Rules 3, 4, 5, 8 and 10 of git-check-ref-format(1): anywhere in the name.
_FORBIDDEN = re.compile(r"\.\.|[\x00-\x20\x7f~^:?*\[\\]|@\{")


def is_valid_ref_name(name: str) -> bool:
    """True when `git check-ref-format <name>` would accept `name`."""
    if name == "@" or _FORBIDDEN.search(name):
        return False
    components = name.split("/")
    if len(components) < 2 or name.endswith("."):
        return False
    # Rules 1 and 6: no empty component (a leading, trailing or doubled slash), none starting
    # with a dot or ending with ".lock".
    return all(part and not part.startswith(".") and not part.endswith(".lock") for part in components)

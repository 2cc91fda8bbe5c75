from hypothesis import given
from hypothesis import strategies as st

from bot.core.diffstat import FileChange, from_numstat_z, parse_numstat, to_numstat, totals


def test_gits_numstat_records_read_as_files_with_their_counts_and_binary_files_without():
    output = "3\t1\tapp/cli.py\0-\t-\tlogo.png\0" + "0\t12\tgone.txt\0"
    assert from_numstat_z(output) == [
        FileChange("app/cli.py", 3, 1),
        FileChange("logo.png", None, None),
        FileChange("gone.txt", 0, 12),
    ]
    assert totals(from_numstat_z(output)) == (3, 13)


def test_a_path_with_tabs_or_a_newline_stays_one_file():
    [change] = from_numstat_z("1\t0\ta\tb\nc\0")
    assert change.path == "a\tb\nc"
    [kept] = parse_numstat(to_numstat([change]))
    assert kept.path == "a\tb\\nc" and (kept.added, kept.deleted) == (1, 0)


def test_lines_that_are_not_numstat_are_skipped_not_guessed():
    assert parse_numstat("x\t1\tpath\n1\t-\tpath\n\n2\t3\n4\t5\tok") == [FileChange("ok", 4, 5)]
    assert parse_numstat(None) == []


paths = st.text(st.characters(blacklist_characters="\0\n", blacklist_categories=("Cs",)), min_size=1)
counts = st.one_of(st.none(), st.integers(0, 10**6))


@given(st.lists(st.builds(lambda p, n: FileChange(p, n, n), paths, counts), max_size=20))
def test_what_lanebot_stores_reads_back_as_it_was(changes):
    assert parse_numstat(to_numstat(changes)) == changes

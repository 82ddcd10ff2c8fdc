"""Exact duplicates (nanodata.pipeline.dedup.exact) on real text, the lines of libstdc++'s headers, where `}`,
blank lines and `#include`s repeat thousands of times: its two faces, the streaming `SeenTexts` and the batch
`first_occurrences`, keep exactly the first copy of each text in output order, and keep the same docs."""

import hashlib
import random
import sqlite3

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st
from near_copies import headers

from nanodata.pipeline.dedup.exact import SeenTexts, digest_of, first_occurrences
from nanodata.pipeline.shuffle import text_digests

LINES = [line for path in headers(0, 20_000)[:40] for line in path.read_text().splitlines()]


def halves(texts) -> tuple[np.ndarray, np.ndarray]:
    """Each text's digest as its two big-endian 64-bit halves, as the DAG's bucket task passes them."""
    digests = [digest_of(t) for t in texts]
    return (np.array([int.from_bytes(d[:8], "big") for d in digests], dtype=np.uint64),
            np.array([int.from_bytes(d[8:], "big") for d in digests], dtype=np.uint64))


def first_by_place(texts, place) -> list[int]:
    """The reference rule, on the texts themselves: the index of each text's doc with the smallest place."""
    best: dict[str, int] = {}
    for i, text in enumerate(texts):
        if text not in best or tuple(place[i]) < tuple(place[best[text]]):
            best[text] = i
    return sorted(best.values())


def test_the_lines_repeat():
    assert len(LINES) > 5000 and 0.2 < len(set(LINES)) / len(LINES) < 0.9


# ---------------------------------------------------------------- the key


def test_digest_is_blake2b_128_of_the_utf8_text_as_to_parquet_hashes_it():
    texts = [*LINES[:200], "", "naïve ünïcode ✓", "line\nbreak", "\x00nul"]
    for text in texts:
        assert digest_of(text) == hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
    assert text_digests(pa.array(texts)) == [digest_of(t) for t in texts]  # to-parquet's column hasher agrees
    assert digest_of("é") != digest_of("e\u0301")  # texts, not what they look like: no normalization


# ---------------------------------------------------------------- streaming: SeenTexts


def test_seen_texts_says_new_exactly_for_each_first_copy(tmp_path):
    seen = SeenTexts(tmp_path / "seen.sqlite")
    new = [seen.add(digest_of(line)) for line in LINES]
    assert (tmp_path / "seen.sqlite").exists()  # the table is on disk while in use
    seen.close()
    first = set()
    assert new == [not (line in first or first.add(line)) for line in LINES]
    assert not (tmp_path / "seen.sqlite").exists()  # and gone after


def test_seen_texts_starts_empty_over_a_killed_runs_table(tmp_path):
    path = tmp_path / "seen.sqlite"
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE seen(digest BLOB PRIMARY KEY) WITHOUT ROWID")
    old.execute("INSERT INTO seen VALUES (?)", (digest_of("int x;"),))
    old.commit()
    old.close()
    seen = SeenTexts(path)
    assert seen.add(digest_of("int x;")) and not seen.add(digest_of("int x;"))
    seen.close()
    path.write_bytes(b"not a database: a file cut short by a kill")
    seen = SeenTexts(path)
    assert seen.add(digest_of("int x;"))
    seen.close()


# ---------------------------------------------------------------- batch: first_occurrences


def test_no_docs_keep_none():
    kept = first_occurrences(np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros((0, 3), np.int64))
    assert kept.dtype == np.int64 and kept.tolist() == []


def test_in_input_order_it_keeps_what_streaming_keeps(tmp_path):
    his, los = halves(LINES)
    kept = first_occurrences(his, los, np.arange(len(LINES), dtype=np.int64).reshape(-1, 1))
    seen = SeenTexts(tmp_path / "seen.sqlite")
    streamed = [i for i, line in enumerate(LINES) if seen.add(digest_of(line))]
    seen.close()
    assert kept.tolist() == streamed
    assert len(kept) == len(set(LINES))


def test_the_first_in_output_order_is_kept_whatever_the_input_order():
    """The bucket task sees docs in any order; place (rank, partition, position), compared left to right, is
    what decides, and the same docs are kept however the rows are shuffled."""
    rng = random.Random(7)
    place = np.array([(rng.randrange(4), rng.randrange(3), i) for i in range(len(LINES))], dtype=np.int64)
    his, los = halves(LINES)
    kept = first_by_place(LINES, place)
    assert first_occurrences(his, los, place).tolist() == kept
    shuffle = np.array(rng.sample(range(len(LINES)), len(LINES)))
    again = first_occurrences(his[shuffle], los[shuffle], place[shuffle])
    assert sorted(shuffle[again].tolist()) == kept  # the same docs, found at their new rows
    assert np.all(np.diff(again) > 0)  # indices ascending


def test_streaming_in_output_order_keeps_the_same_docs(tmp_path):
    """The CLI's writer and the DAG's bucket task cannot disagree: SeenTexts fed in place order keeps the docs
    first_occurrences picks."""
    rng = random.Random(11)
    positions = rng.sample(range(len(LINES)), len(LINES))  # distinct places, as a run's are
    place = np.array([(rng.randrange(8), i % 5, pos) for i, pos in enumerate(positions)], dtype=np.int64)
    order = sorted(range(len(LINES)), key=lambda i: tuple(place[i]))
    seen = SeenTexts(tmp_path / "seen.sqlite")
    streamed = sorted(i for i in order if seen.add(digest_of(LINES[i])))
    seen.close()
    assert first_occurrences(*halves(LINES), place).tolist() == streamed


def test_both_digest_halves_count_and_the_place_columns_are_compared_left_to_right():
    top = np.uint64(2 ** 64 - 1)
    his = np.array([1, 1, 2, top, top, 1], dtype=np.uint64)
    los = np.array([5, 6, 5, top, top, 5], dtype=np.uint64)
    place = np.array([(1, 0), (0, 0), (0, 1), (2, 9), (2, 3), (0, 7)], dtype=np.int64)
    # (1, 5): rows 0 and 5, (0, 7) before (1, 0) though 7 > 0; (1, 6) and (2, 5) differ in one half only;
    # (top, top): rows 3 and 4, tied on the first column, (2, 3) first
    assert first_occurrences(his, los, place).tolist() == [1, 2, 4, 5]


@given(st.lists(st.tuples(st.sampled_from(["}", "", "int x;", "#include <vector>", "é", "e\u0301"]),
                          st.integers(0, 3), st.integers(0, 3)), max_size=60))
def test_kept_docs_are_the_reference_first_copies(docs):
    texts = [text for text, _, _ in docs]
    place = np.array([(a, b, i) for i, (_, a, b) in enumerate(docs)], dtype=np.int64).reshape(-1, 3)
    his, los = halves(texts)
    assert first_occurrences(his, los, place).tolist() == first_by_place(texts, place)

"""MinHash signatures (nanodata.pipeline.dedup.minhash) against BigCode's shingling written plainly, on libstdc++'s
headers: the shingles, the Jaccard estimate against the exact Jaccard of planted near-copies, determinism across
processes, and the LSH shape."""

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from near_copies import STD_HEADERS, exact_jaccard, headers, mutate_tokens, planted, rate_for, shingles, tokens

from nanodata.pipeline.dedup.minhash import BINS, LSH_BINS, band_keys, jaccard, lsh_shape, shingle_hashes, signature

ALL_HEADERS = headers(0, 1 << 30)            # every file of bits/, name order
MEDIUM = headers(8_000, 40_000)              # thousands of shingles each: bins well filled


def test_headers_are_there():
    assert len(ALL_HEADERS) > 100 and len(MEDIUM) >= 24


# ---------------------------------------------------------------- (a) the shingles are BigCode's


def test_distinct_hashes_are_distinct_shingles_on_every_header():
    """One hash per distinct 5-gram: as many distinct hashes as the reference has distinct shingles."""
    for path in ALL_HEADERS:
        text = path.read_text()
        assert len(np.unique(shingle_hashes(text))) == len(shingles(text)), path.name
        assert len(shingle_hashes(text)) == max(0, len(tokens(text)) - 4), path.name


@pytest.mark.parametrize("name", [p.name for p in ALL_HEADERS[::15]])
def test_each_reference_shingle_hashes_as_in_the_file(name):
    """The hash of each reference 5-gram (the gram alone, as text) is among the file's hashes, and they are all
    of them: the same shingle hashes the same wherever it stands, and nothing else is hashed."""
    text = (STD_HEADERS / name).read_text()
    alone = set()
    for gram in shingles(text):
        (h,) = shingle_hashes(" ".join(gram)).tolist()
        alone.add(h)
    assert alone == set(shingle_hashes(text).tolist())


def test_case_punctuation_and_spacing_do_not_matter():
    for path in MEDIUM[:10]:
        text = path.read_text()
        plain = " ".join(tokens(text))
        assert np.array_equal(signature(text), signature(plain)), path.name
        assert np.array_equal(signature(text), signature(text.upper().replace(" ", "\t\n  ;"))), path.name
        changed = mutate_tokens(text, 0.01, seed=1)
        assert not np.array_equal(signature(text), signature(changed)), path.name


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=200))
@example("Ünïcödé ß_x İstanbul 名前 変数 x1 x2 __y__")
@example("a  b\tc\nd;e")
@example("a;b;c;d;e;")
def test_shingles_of_any_text(text):
    ref = shingles(text)
    hashes = shingle_hashes(text)
    assert len(np.unique(hashes)) == len(ref)
    assert {int(shingle_hashes(" ".join(g))[0]) for g in ref} == set(hashes.tolist())
    assert (signature(text) is None) == (not ref)


def test_fewer_than_five_tokens_have_no_signature():
    for text in ["", "   ", "#pragma once\n", "int fn(int a);", "a b c d", ";;a;;b;;c;;d;;", "std::vector<int> v;"]:
        assert len(tokens(text)) < 5, text
        assert signature(text) is None, text
        assert len(shingle_hashes(text)) == 0, text
    for text in ["int fn(int a, int b);", "a b c d e"]:
        assert len(tokens(text)) >= 5
        sig = signature(text)
        assert sig is not None and sig.shape == (BINS,) and sig.dtype == np.uint32, text


def test_densified_small_files_agree_with_themselves_only():
    """A file of one shingle fills every bin (densification); two different one-shingle files share none."""
    one, other = signature("int fn(int a);x"), signature("long fn(long a);y")
    assert len(set(one.tolist())) == 1 and np.array_equal(one, signature("INT  fn (int a) x"))
    assert jaccard(one, other) == 0.0


# ---------------------------------------------------------------- (b) the estimate of Jaccard


def _planted_pairs() -> list[tuple[str, str, float]]:
    """Near-copies of 12 headers at 6 target similarities in [0.3, 1.0], token- and line-mutated in turn."""
    pairs = []
    for i, path in enumerate(MEDIUM[:24:2]):
        text = path.read_text()
        for k, target in enumerate((0.32, 0.45, 0.6, 0.75, 0.88, 0.97)):
            copy, j = planted(text, target, 100 * i + k, target - 0.04, target + 0.04, lines=bool((i + k) % 2))
            pairs.append((text, copy, j))
    return pairs


def test_estimate_is_close_to_exact_jaccard():
    pairs = _planted_pairs()
    exact = np.array([j for _, _, j in pairs])
    assert len(pairs) >= 40 and exact.min() >= 0.28 and exact.max() >= 0.95
    for lo, hi in ((0.28, 0.5), (0.5, 0.7), (0.7, 0.85), (0.85, 1.0)):  # spread over the range
        assert ((exact >= lo) & (exact < hi)).sum() >= 8, (lo, hi, np.sort(exact))
    estimate = np.array([jaccard(signature(a), signature(b)) for a, b, _ in pairs])
    error = estimate - exact
    assert np.abs(error).mean() < 0.03, np.abs(error).mean()
    assert np.abs(error).max() < 0.1, (np.abs(error).max(), exact[np.abs(error).argmax()])
    assert abs(error.mean()) < 0.015, error.mean()  # no bias either way


def test_same_shingles_estimate_one():
    for path in MEDIUM[:8]:
        text = path.read_text()
        copy = text.replace("  ", " ").upper()  # another text, the same shingles
        assert copy != text and exact_jaccard(text, copy) == 1.0
        assert jaccard(signature(text), signature(copy)) == 1.0


def test_estimate_of_unrelated_headers_is_their_small_jaccard():
    sigs = [(p.read_text(), signature(p.read_text())) for p in MEDIUM[:16]]
    errors = [jaccard(sa, sb) - exact_jaccard(a, b) for i, (a, sa) in enumerate(sigs) for b, sb in sigs[i + 1:]]
    assert np.abs(errors).max() < 0.1 and np.abs(errors).mean() < 0.03


# ---------------------------------------------------------------- (c) the same signature in any process

_CHILD = """
import sys
from nanodata.pipeline.dedup.minhash import signature
for name in sys.argv[1:]:
    print(signature(open(name, encoding="utf-8").read()).tobytes().hex())
"""


def test_signature_is_the_same_in_a_fresh_process():
    paths = [str(p) for p in ALL_HEADERS[::10]]
    here = [signature(open(p, encoding="utf-8").read()).tobytes().hex() for p in paths]
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", _CHILD, *paths], env=env, capture_output=True, text=True,
                             check=True, timeout=120)
        assert out.stdout.split() == here


# ---------------------------------------------------------------- (d) the LSH shape


@pytest.mark.parametrize("threshold", [round(0.5 + 0.05 * i, 2) for i in range(11)])
def test_lsh_shape_finds_pairs_at_the_threshold(threshold):
    bands, rows = lsh_shape(threshold)
    assert bands >= 1 and rows >= 1 and bands * rows <= LSH_BINS
    assert 1 - (1 - threshold ** rows) ** bands >= 0.95
    if rows < LSH_BINS:  # the most rows that do: one more per band, with the bands that then fit, would not
        more = rows + 1
        assert 1 - (1 - threshold ** more) ** (LSH_BINS // more) < 0.95


def test_band_keys_agree_exactly_where_the_band_agrees():
    a = signature(MEDIUM[0].read_text())
    b = signature(mutate_tokens(MEDIUM[0].read_text(), rate_for(0.7), seed=3))
    bands, rows = lsh_shape(0.7)
    keys = band_keys(np.stack([a, b]), bands, rows)
    assert keys.shape == (2, bands)
    same = (a[:bands * rows] == b[:bands * rows]).reshape(bands, rows).all(axis=1)
    assert same.any() and not same.all()
    assert np.array_equal(keys[0] == keys[1], same)

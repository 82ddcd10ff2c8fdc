"""Near-dedup end to end (`chunk_to_jsonl(..., dedup="near")`) on trees of libstdc++'s headers and planted copies
of them whose exact Jaccard the tests compute: recall above the threshold, nothing removed well below it, the
kept-copy rule, exact dedupe's output, invariance to workers, partitions and modes, and compilable docs that
still pull a removed file's definitions."""

import json

import pytest
from near_copies import distinct_headers, exact_jaccard, planted, read_docs, shingles

from nanodata.pipeline.chunkbuild import chunk_to_jsonl
from nanodata.settings import MODES

ORIGINALS = 24   # real headers, pairwise exact Jaccard <= 0.35
HIGH = 2         # near-copies of each original at exact Jaccard in [0.8, 0.98]: each must go
RUN = {"max_tokens": 2048, "mode": "basic", "workers": 1}


def _run(out, tree, **settings) -> tuple[dict, bytes]:
    summary = chunk_to_jsonl(out, project_dirs=[tree], **{**RUN, **settings})
    return summary, out.read_bytes()


def _removed(summary: dict) -> dict[str, str]:
    """removed source -> kept source, from the summary's examples (all of them: fewer than EXAMPLES_KEPT)."""
    near = summary["near_duplicates"]
    assert len(near["examples"]) == near["files_removed"]
    return {e["removed"]: e["kept"] for e in near["examples"]}


def _sources(data: bytes) -> list[str]:
    return [json.loads(line)["source"] for line in data.splitlines()]


@pytest.fixture(scope="module")
def planted_tree(tmp_path_factory):
    """aaa/: the originals; bbb/: one loose copy of each (exact Jaccard in [0.3, 0.5] with its original and at
    most 0.5 with every other file); ccc/: HIGH near-copies of each (exact Jaccard in [0.8, 0.98]). Input order
    is aaa, bbb, ccc. Returns (tree, {source: (kind, original's source, exact Jaccard with it)}, {source: text})."""
    tree = tmp_path_factory.mktemp("planted") / "tree"
    files, texts = {}, {}
    for i, path in enumerate(distinct_headers(ORIGINALS, 4_000, 16_000)):
        text = path.read_text()
        original = f"aaa/{path.name}"
        texts[original] = text
        files[original] = ("original", original, 1.0)
        copy, j = planted(text, 0.4, 7 * i, 0.3, 0.48, lines=bool(i % 2))
        texts[f"bbb/{path.name}"] = copy
        files[f"bbb/{path.name}"] = ("loose", original, j)
        for k in range(HIGH):
            target = (0.84, 0.93)[k]
            copy, j = planted(text, target, 7 * i + 1 + k, 0.8, 0.98, lines=bool((i + k) % 2))
            texts[f"ccc/{k}_{path.name}"] = copy
            files[f"ccc/{k}_{path.name}"] = ("high", original, j)
    for source, text in texts.items():
        (tree / source).parent.mkdir(parents=True, exist_ok=True)
        (tree / source).write_text(text)
    return tree, files, texts


@pytest.fixture(scope="module")
def near_basic(planted_tree, tmp_path_factory):
    tree, _, _ = planted_tree
    return _run(tmp_path_factory.mktemp("near") / "out.jsonl", tree)


def test_planted_copies_are_where_they_should_be(planted_tree):
    """The tree's premises, on exact Jaccard: each loose copy is at most 0.5 like any other file of the tree."""
    _, files, texts = planted_tree
    sets = {s: shingles(t) for s, t in texts.items()}
    high = [j for kind, _, j in files.values() if kind == "high"]
    assert len(high) >= 40 and min(high) >= 0.8
    loose = [s for s, (kind, _, _) in files.items() if kind == "loose"]
    assert len(loose) >= 20
    for source in loose:
        assert max(exact_jaccard(sets[source], sets[other]) for other in sets if other != source) <= 0.5, source


def test_recall_of_near_copies_above_threshold(planted_tree, near_basic):
    _, files, texts = planted_tree
    summary, data = near_basic
    removed = _removed(summary)
    high = [s for s, (kind, _, _) in files.items() if kind == "high"]
    caught = [s for s in high if s in removed]
    assert len(caught) >= 0.95 * len(high), sorted(set(high) - set(caught))
    for source in caught:  # the original (first in input order) is kept in its place
        assert removed[source] == files[source][1], source
    near = summary["near_duplicates"]
    by_source = {e["removed"]: e["jaccard"] for e in near["examples"]}
    for source in caught:
        assert by_source[source] >= 0.7 and abs(by_source[source] - files[source][2]) < 0.1, source
    # their docs are gone; every other file keeps some
    out = set(_sources(data))
    assert not out & set(removed)
    assert {s for s in files if s not in removed} <= out
    assert near["docs_removed"] >= len(removed)
    assert near["files_signed"] == len(files) == summary["files_read"]
    assert near["bytes_removed"] == sum(len(texts[s].encode()) for s in removed)
    assert near["clusters"] == len(set(removed.values()))
    assert set(near["by_project"]) == {"ccc"} and near["by_project"]["ccc"]["removed"] == len(removed)
    assert near["by_project"]["ccc"]["files"] == len(high)
    assert sum(b["files"] for b in near["jaccard_histogram"]) == len(removed)


def test_loose_copies_are_never_removed(planted_tree, near_basic):
    _, files, _ = planted_tree
    removed = _removed(near_basic[0])
    assert {s for s, (kind, _, j) in files.items() if kind == "loose" and j <= 0.5}.isdisjoint(removed)
    assert not any(files[s][0] != "high" for s in removed)


def test_exact_output_is_near_output_plus_removed_docs(planted_tree, near_basic, tmp_path):
    """Every removed file comes after every kept one in input order (ccc/), so exact dedupe alone writes the
    near run's docs, then the removed files' docs."""
    tree, _, _ = planted_tree
    summary, data = near_basic
    removed = set(_removed(summary))
    exact_summary, exact = _run(tmp_path / "exact.jsonl", tree, dedup="exact")
    assert exact_summary["near_duplicates"] is None and exact_summary["dedup"] == "exact"
    lines = exact.splitlines(keepends=True)
    kept = b"".join(line for line in lines if json.loads(line)["source"] not in removed)
    assert kept == data
    assert len(lines) - kept.count(b"\n") > 0


def test_without_near_copies_near_and_exact_agree(planted_tree, tmp_path):
    _, files, texts = planted_tree
    tree = tmp_path / "tree"
    for source, text in texts.items():
        if files[source][0] != "high":
            (tree / source).parent.mkdir(parents=True, exist_ok=True)
            (tree / source).write_text(text)
    near, near_data = _run(tmp_path / "near.jsonl", tree)
    exact, exact_data = _run(tmp_path / "exact.jsonl", tree, dedup="exact")
    assert near_data == exact_data and near["docs"] == exact["docs"] > 0
    assert near["near_duplicates"]["files_removed"] == 0 and near["near_duplicates"]["examples"] == []
    assert near["near_duplicates"]["docs_removed"] == 0


@pytest.mark.parametrize("settings", [{"workers": 2}, {"partition_mb": 0.1}])
def test_output_and_summary_do_not_depend_on_workers_or_partitions(planted_tree, near_basic, tmp_path, settings):
    tree, _, _ = planted_tree
    summary, data = near_basic
    other, other_data = _run(tmp_path / "out.jsonl", tree, **settings)
    assert other_data == data
    assert other["near_duplicates"] == summary["near_duplicates"]


def test_removed_files_do_not_depend_on_the_mode(planted_tree, near_basic, tmp_path):
    tree, _, _ = planted_tree
    removed = _removed(near_basic[0])
    assert removed

    def without_docs(near: dict) -> dict:  # the docs a removed file had depend on the mode; nothing else does
        return {k: v for k, v in near.items() if k != "docs_removed"}

    for mode in MODES:
        summary, data = _run(tmp_path / f"{mode}.jsonl", tree, mode=mode)
        assert _removed(summary) == removed, mode
        assert without_docs(summary["near_duplicates"]) == without_docs(near_basic[0]["near_duplicates"]), mode
        assert not set(_sources(data)) & set(removed), mode
        assert summary["near_duplicates"]["docs_removed"] >= len(removed), mode


def test_compilable_invariant_to_workers_and_partitions(planted_tree, tmp_path):
    tree, _, _ = planted_tree
    one, one_data = _run(tmp_path / "one.jsonl", tree, mode="compilable")
    other, other_data = _run(tmp_path / "other.jsonl", tree, mode="compilable", workers=2, partition_mb=0.15)
    assert one_data == other_data and one["near_duplicates"] == other["near_duplicates"]


# ---------------------------------------------------------------- which copy is kept

# (earlier in input order, later, the one kept): identical copies of one real header per case
PAIRS = [
    ("p01/3rdparty/h.h", "p01/src/h.h", "p01/src/h.h"),
    ("a02/contrib/h.h", "b02/h.h", "b02/h.h"),                  # across projects
    ("p03/third_party/x/h.h", "p03/zz/h.h", "p03/zz/h.h"),
    ("p04/Vendor/h.h", "p04/w/h.h", "p04/w/h.h"),               # case ignored
    ("p05/external/h.h", "p05/src/h.h", "p05/src/h.h"),
    ("p06/deps/h.h", "p06/src/h.h", "p06/src/h.h"),
    ("p07/src/subprojects/lib/h.h", "p07/src/z/h.h", "p07/src/z/h.h"),
    ("p08/a/h.h", "p08/b/h.h", "p08/a/h.h"),                    # neither vendored: input order
    ("p09/h.h", "p10/h.h", "p09/h.h"),                          # neither, across projects
    ("p11/third_party/h.h", "p11/vendor/h.h", "p11/third_party/h.h"),  # both vendored: input order
    ("p12/src/h.h", "p12/vendor/h.h", "p12/src/h.h"),
    ("p13/my_vendor/h.h", "p13/src/h.h", "p13/my_vendor/h.h"),  # not a vendoring segment
    ("p14/vendor.d/h.h", "p14/x/h.h", "p14/vendor.d/h.h"),      # a whole segment only
]
TRIPLE = ("p15/bundled/h.h", "p15/one/h.h", "p15/two/h.h")      # kept: p15/one/h.h
TINY = "int fn(int a);\n"                                       # 4 tokens: no signature
TINY_COPIES = ["t16/vendor/t.h"] + [f"t16/x{i}/t.h" for i in range(9)]


@pytest.fixture(scope="module")
def kept_rule(tmp_path_factory):
    tree = tmp_path_factory.mktemp("kept") / "tree"
    cases = [*PAIRS, (*TRIPLE[:2], TRIPLE[1])]
    headers = distinct_headers(len(cases), 3_000, 12_000)
    texts = {}
    for (first, second, _), path in zip(cases, headers, strict=True):
        texts[first] = texts[second] = path.read_text()
    texts[TRIPLE[2]] = texts[TRIPLE[0]]
    for source in TINY_COPIES:
        texts[source] = TINY
    for source, text in texts.items():
        (tree / source).parent.mkdir(parents=True, exist_ok=True)
        (tree / source).write_text(text)
    out = tree.parent / "out.jsonl"
    summary = chunk_to_jsonl(out, project_dirs=[tree], **RUN)
    return summary, read_docs(out), texts


def test_input_order_is_the_path_order(kept_rule):
    _, docs, _ = kept_rule
    order = list(dict.fromkeys(d["source"] for d in docs))
    for first, second, kept in PAIRS:
        assert (first < second) and kept in order


def test_vendored_copy_loses_else_the_earlier(kept_rule):
    summary, docs, _ = kept_rule
    removed = _removed(summary)
    expected = {(second if kept == first else first): kept for first, second, kept in PAIRS}
    expected.update({TRIPLE[0]: TRIPLE[1], TRIPLE[2]: TRIPLE[1]})
    assert removed == expected
    assert all(e["jaccard"] == 1.0 for e in summary["near_duplicates"]["examples"])
    out = {d["source"] for d in docs}
    assert out.isdisjoint(expected) and {kept for _, _, kept in PAIRS} | {TRIPLE[1]} <= out


def test_tiny_file_is_left_to_exact_dedupe(kept_rule):
    summary, docs, _ = kept_rule
    assert summary["near_duplicates"]["files_signed"] == summary["files_read"] - len(TINY_COPIES)
    assert not set(TINY_COPIES) & set(_removed(summary))
    tiny = [d for d in docs if d["text"] == TINY]
    assert [d["source"] for d in tiny] == [TINY_COPIES[0]]  # the first, vendored or not: exact dedupe's rule
    assert summary["duplicates_dropped"] >= len(TINY_COPIES) - 1


# ---------------------------------------------------------------- a removed file's definitions still reach others

HELPER_VENDORED = "int helper_fn(int x) { return x * 7 + 3; }\n"
HELPER_UPSTREAM = "int helper_fn(int x) { return x * 7 + 4; }\n"
CALLER = '#include "util.h"\n\nint main_value(int x) {\n  return helper_fn(x) + 1;\n}\n'


def test_compilable_docs_still_pull_a_removed_files_definitions(tmp_path):
    """app/ vendors a copy of util/ (third_party/util/util.h, a near-copy of util/util.h): the vendored copy loses
    its docs to the upstream file, yet app/main.cpp's compilable doc still brings the helper it calls from the
    copy its own project holds (globalindex's rule: the caller's project first)."""
    (header,) = distinct_headers(1, 6_000, 12_000)
    body = header.read_text()
    tree = tmp_path / "tree"
    texts = {"app/main.cpp": CALLER, "app/third_party/util/util.h": body + HELPER_VENDORED,
             "util/util.h": body + HELPER_UPSTREAM}
    assert exact_jaccard(texts["app/third_party/util/util.h"], texts["util/util.h"]) > 0.95
    for source, text in texts.items():
        (tree / source).parent.mkdir(parents=True, exist_ok=True)
        (tree / source).write_text(text)
    for dedup in ("near", "exact"):
        summary = chunk_to_jsonl(tmp_path / f"{dedup}.jsonl", project_dirs=[tree], **{**RUN, "mode": "compilable"},
                                 dedup=dedup)
        docs = read_docs(tmp_path / f"{dedup}.jsonl")
        sources = {d["source"] for d in docs}
        (caller,) = [d for d in docs if d["source"] == "app/main.cpp" and "main_value" in d["text"]]
        assert caller["kind"] == "compilable"
        assert HELPER_VENDORED.strip() in caller["text"] and HELPER_UPSTREAM.strip() not in caller["text"]
        assert caller["text"].index("helper_fn(int x)") < caller["text"].index("int main_value")
        if dedup == "near":
            assert _removed(summary) == {"app/third_party/util/util.h": "util/util.h"}
            assert "app/third_party/util/util.h" not in sources
            assert not any(HELPER_VENDORED.strip() in d["text"] for d in docs if d["source"] != "app/main.cpp")
        else:
            assert "app/third_party/util/util.h" in sources
        assert "util/util.h" in sources

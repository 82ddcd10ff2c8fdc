"""A file leaves the corpus only for a kept twin (near.kept_twins): walked in keep order, a file is removed when a
verified pair joins it to a file already kept, never through a chain of removed files. Checked on the rule itself
(hand-made edges, and against a plain walk over random graphs) and end to end on files whose Jaccard is built in."""

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nanodata.pipeline.chunkbuild import chunk_to_jsonl
from nanodata.pipeline.dedup.minhash import jaccard, signature
from nanodata.pipeline.dedup.near import kept_twins

THRESHOLD = 0.7


def twins(edges: list[tuple[int, int, float]], n: int) -> list[int]:
    a, b, j = (np.array(column) for column in zip(*edges, strict=True)) if edges else (np.zeros(0, int),) * 3
    return kept_twins(a.astype(np.int64), b.astype(np.int64), j.astype(np.float32), n)[0].tolist()


def test_a_chain_removes_only_the_file_next_to_a_kept_one():
    """A-B and B-C over the threshold, A-C under it: B goes for A, C stays (components would remove C too)."""
    assert twins([(0, 1, 0.75), (1, 2, 0.75)], 3) == [-1, 0, -1]


def test_the_most_similar_kept_file_is_the_twin():
    assert twins([(0, 3, 0.72), (1, 3, 0.95), (2, 3, 0.99), (1, 2, 0.9)], 4) == [-1, -1, 1, 1]


def plain_walk(edges: list[tuple[int, int, float]], n: int) -> list[int]:
    """The rule as stated: in keep order, each file's most similar kept earlier neighbour (ties: the earlier)."""
    twin = [-1] * n
    for node in range(n):
        kept = [(-j, a) for a, b, j in edges if b == node and twin[a] < 0]
        twin[node] = min(kept)[1] if kept else -1
    return twin


@settings(max_examples=300, derandomize=True)
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(st.just(n), st.lists(
    st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.sampled_from([0.7, 0.75, 0.8, 0.9, 1.0])),
    max_size=30))))
@example((3, [(0, 1, 0.8), (1, 2, 0.8), (0, 2, 0.8)]))
def test_one_pass_equals_the_plain_walk(graph):
    n, raw = graph
    edges = sorted({(min(a, b), max(a, b)): j for a, b, j in raw if a != b}.items())
    edges = [(a, b, j) for (a, b), j in edges]
    assert twins(edges, n) == plain_walk(edges, n)
    for node, twin in enumerate(twins(edges, n)):  # every removal for a kept earlier file joined to it
        assert twin < 0 or (twin < node and twins(edges, n)[twin] < 0 and any(
            (a, b) == (twin, node) for a, b, _ in edges))


# ---------------------------------------------------------------- end to end, Jaccard built in

def block(name: str, words: int = 40) -> str:
    return " ".join(f"{name}_{i}" for i in range(words))


def source(blocks: list[str]) -> str:
    """A C++ file of one comment line per block (BigCode's tokens: the words; `//` is not one)."""
    return "".join(f"// {b}\nint v_{n} = {n};\n" for n, b in enumerate(blocks))


def estimated(x: str, y: str) -> float:
    return float(jaccard(signature(x), signature(y)))


def run(tmp_path, files: dict[str, str]) -> dict:
    tree = tmp_path / "tree"
    for name, text in files.items():
        (tree / "p" / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / "p" / name).write_text(text)
    summary = chunk_to_jsonl(tmp_path / "out.jsonl", project_dirs=[tree], mode="basic", max_tokens=2048,
                             dedup="near", filters="none", redact="none")
    return summary["near_duplicates"]


def test_chain_end_to_end(tmp_path):
    """n = 21 blocks, k = 3 changed per step: A-B and B-C at J 0.75, A-C at about 0.56."""
    x = [block(f"x{i}") for i in range(21)]
    a = source(x)
    b = source(x[:18] + [block(f"y{i}") for i in range(3)])
    c = source(x[:15] + [block(f"z{i}") for i in range(3)] + [block(f"y{i}") for i in range(3)])
    assert estimated(a, b) >= THRESHOLD and estimated(b, c) >= THRESHOLD and estimated(a, c) < 0.62
    near = run(tmp_path, {"a.cpp": a, "b.cpp": b, "c.cpp": c})
    assert near["files_removed"] == 1
    (example_,) = near["examples"]
    assert example_["removed"] == "p/b.cpp" and example_["kept"] == "p/a.cpp" and example_["jaccard"] >= THRESHOLD


def test_six_copies_behind_a_file_just_under_the_threshold_keep_one(tmp_path):
    """Six identical files and, first in input order, a file at J just under 0.7 to them: one of the six stays,
    the other five go for it (never all six for the first file)."""
    x = [block(f"x{i}") for i in range(40)]
    copy = source(x)
    first = source(x[:32] + [block(f"w{i}") for i in range(8)])
    assert 0.6 < estimated(first, copy) < THRESHOLD
    files = {"a_first.cpp": first, **{f"b{i}/main.cpp": copy for i in range(6)}}
    near = run(tmp_path, files)
    assert near["files_removed"] == 5
    assert {e["kept"] for e in near["examples"]} == {"p/b0/main.cpp"}
    assert sorted(e["removed"] for e in near["examples"]) == [f"p/b{i}/main.cpp" for i in range(1, 6)]
    assert all(e["jaccard"] == 1.0 for e in near["examples"])

"""parse_units on small real C++: unit kinds, comments, namespaces, references, exact counts."""

import random

import pytest
from cpp_projects import LAYERS, read_docs, write_jsonl

from nanodata.errors import NanodataError
from nanodata.pipeline.chunkbuild import chunk_to_jsonl
from nanodata.pipeline.chunking.graphs import callees_in_file, topo_order
from nanodata.pipeline.chunking.parse import parse_units
from nanodata.tokenizer import SPLIT_PATTERN, load, save_encoding_dir


def _parse(text, tokenizer):
    counter = lambda texts: [tokenizer.count_tokens(t) for t in texts]  # noqa: E731
    return parse_units(text, counter)


def test_units_kinds_names_and_comments(tokenizer):
    fu = _parse(LAYERS["calls.cpp"], tokenizer)
    by_name = {u.name: u for u in fu.units if u.name}
    assert [u.kind for u in fu.units if u.kind == "preamble"] == ["preamble"] * 6  # 2 includes, define, 3 protos
    assert {"top_value", "middle_value", "leaf_value", "ping", "pong", "clamp_value", "clamp_int"} <= set(by_name)
    assert fu.text_of(by_name["top_value"]).startswith("/// Entry point of the call chain")
    assert fu.text_of(by_name["leaf_value"]).startswith("/* leaf_value calls nothing. */")
    assert by_name["middle_value"].calls == ("leaf_value",)
    assert "Derived" in by_name["top_value"].types
    # namespaces are recorded as the scope to re-open around the unit
    assert [entry[0].strip() for entry in by_name["clamp_value"].scope] == ["namespace util {", "namespace detail {"]
    assert [entry[0].strip() for entry in by_name["clamp_int"].scope] == ["namespace util {"]


def test_segments_count_additively(tokenizer):
    for text in LAYERS.values():
        fu = _parse(text, tokenizer)
        assert sum(fu.tokens) == tokenizer.count_tokens(fu.whole_text())
        for unit in fu.units:
            assert unit.tokens == tokenizer.count_tokens(fu.text_of(unit))


def test_class_members_and_out_of_class_methods(tokenizer):
    src = ("template <class T>\nclass Box : public Base<T> {\n public:\n  // getter\n  T get() const { return v; }\n"
           "  T v;  // the value\n};\n\nint Box2::size() const { return 3; }\nA::~A() {}\n")
    fu = _parse(src, tokenizer)
    box, size, dtor = fu.units
    assert (box.kind, box.name) == ("type", "Box") and "Base" in box.types
    members = ["".join(fu.texts[s] for s in m.segments) for m in box.part.members]
    assert members == [" public:\n", "  // getter\n  T get() const { return v; }\n", "  T v;  // the value\n"]  # exact source lines
    assert (size.kind, size.name, size.owner) == ("function", "size", "Box2")
    assert (dtor.name, dtor.owner) == ("~A", "A")


def test_syntax_errors_still_give_units(tokenizer):
    fu = _parse("int ok() { return 1; }\nint broken( { return ; \nint after() { return 2; }\n", tokenizer)
    assert fu.syntax_errors
    assert "int ok() { return 1; }" in fu.whole_text() and "after" in fu.whole_text()


def test_topo_order_levels_and_cycles():
    nodes = ["top", "mid", "leaf", "ping", "pong"]
    deps = {"top": ["mid"], "mid": ["leaf"], "ping": ["pong"], "pong": ["ping"]}
    assert topo_order(nodes, deps) == ["leaf", "mid", "top", "ping", "pong"]
    assert topo_order(list(reversed(nodes)), deps) == ["leaf", "mid", "top", "pong", "ping"]


def _topo_by_rescan(nodes, deps):
    """The rule stated plainly: each round takes every unplaced node whose dependencies are all placed,
    in position order; a round with none takes the earliest unplaced node alone."""
    members = set(nodes)
    remaining = {n: {d for d in deps.get(n, ()) if d in members and d != n} for n in nodes}
    placed, order = set(), []
    while len(order) < len(nodes):
        ready = [n for n in nodes if n not in placed and remaining[n] <= placed] or \
                [next(n for n in nodes if n not in placed)]
        order.extend(ready)
        placed.update(ready)
    return order


def test_topo_order_matches_the_rescan_rule_on_random_graphs():
    rng = random.Random(7)
    for _ in range(3000):
        n = rng.randint(0, 12)
        nodes = rng.sample(range(n), n)
        deps = {i: [rng.randint(-2, n + 1) for _ in range(rng.randint(0, 4))] for i in range(n) if rng.random() < 0.8}
        assert topo_order(nodes, deps) == _topo_by_rescan(nodes, deps), (nodes, deps)


def test_callees_in_file(tokenizer):
    fu = _parse(LAYERS["calls.cpp"], tokenizer)
    names = [u.name for u in fu.units]
    calls = callees_in_file(fu.units)
    assert [names[j] for j in calls[names.index("top_value")]] == ["middle_value"]


GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def _tokenizer_dir(path, pattern):
    ranks = {bytes([b]): b for b in range(256)}
    for token in (b"  ", b"\n ", b"\n\n", b"in", b"int", b"    "):
        ranks[token] = len(ranks)
    return save_encoding_dir(path, "tiny", pattern, ranks, {"<|bos|>": len(ranks)}, "<|bos|>")


def test_trained_tokenizer_dirs_checked_for_additivity(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [LAYERS["calls.cpp"]])
    good = _tokenizer_dir(tmp_path / "nanochat_style", SPLIT_PATTERN)
    chunk_to_jsonl(tmp_path / "out.jsonl", inputs=[src], tokenizer=str(good), max_tokens=200, mode="dep-aware")
    docs = read_docs(tmp_path / "out.jsonl")
    assert len(docs) > 1 and all(load(str(good)).count_tokens(d["text"]) == d["n_tokens"] <= 200 for d in docs)
    bad = _tokenizer_dir(tmp_path / "gpt2_style", GPT2_PATTERN)
    with pytest.raises(NanodataError, match="--tokenizer .*gpt2_style: its split pattern merges tokens across lines"):
        chunk_to_jsonl(tmp_path / "out2.jsonl", inputs=[src], tokenizer=str(bad))


@pytest.mark.parametrize("limit", [64, 2048])
def test_a_line_over_the_budget_is_cut_into_pieces_within_it(limit):
    """A minified one-line file of ~1 MB (multi-byte characters included): the pieces join back into the line, each
    is within the budget by a recount, and each but the last is nearly full (the cut follows the line's tokens)."""
    from nanodata.pipeline.chunking.pack import _cut_line, counter_for

    counter = counter_for("cl100k_base")
    rng = random.Random(limit)
    words = ["int", "x", "=", "{", "0x1f,", "é", "日本語", '"str"', "  ", "a_b_c", "(", ")", ";", "->", "🙂", "0"]
    line = "".join(rng.choice(words) for _ in range(400_000))
    pieces = _cut_line(line, limit, counter)
    assert "".join(pieces) == line
    counts = [counter.count(piece) for piece in pieces]
    assert max(counts) <= limit and min(counts[:-1]) >= limit - 8

"""The chunker's shortcuts answer exactly as the rules they stand for: export macros found from their class keys
(syntax.export_macros) as by a search of EXPORT_MACRO, a file's encoding kept for its segments' counts
(pack.Counter.token_ends), units' lines read off per-segment bounds (units.FileUnits.lines_of), lines kept read
off the docs' bodies (fidelity.file_stats) as counting them one by one gives, and plain data's fields checked in
bulk (storage.plain) with the values and errors one converter per field gives, compilable levels over budget left
unordered (Packer.over_budget) as trying each gives. And a pass's frozen heap (pipeline._heap_frozen) is the
caller's again once it ends."""

import gc
import random
from dataclasses import dataclass

import pytest
from cpp_projects import CYCLE_OF_BASES, LAYERS, STD_HEADERS, STD_SUBSET, write_jsonl
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nanodata.pipeline.chunkbuild import chunk_to_jsonl
from nanodata.pipeline.chunkbuild.stored import UNITS
from nanodata.pipeline.chunking.fidelity import CUTS, _every_line_held, file_stats
from nanodata.pipeline.chunking.modes import Chunker, Index, as_doc, whole_file
from nanodata.pipeline.chunking.pack import Counter, Packer, counter_for
from nanodata.pipeline.chunking.parse import parse_units
from nanodata.pipeline.chunking.syntax import EXPORT_MACRO, export_macros
from nanodata.pipeline.chunking.units import FileUnits
from nanodata.storage.plain import Codec, Undecodable
from nanodata.tokenizer import load

REAL_FILES = {**{name: (STD_HEADERS / name).read_text() for name in STD_SUBSET}, **LAYERS}
MACRO_CASES = ["class LEVELDB_EXPORT Env {", "xclass FOO Bar {", "_struct A B : C", "(union U2 X{",
               "classclass FOO Bar {", "struct  A_B\n C final : x", "class A class B C {", "enum class K X {"]


@settings(max_examples=300, derandomize=True)
@given(st.text(alphabet="clasrutnio AXB_Y1:{ \n\tf", max_size=40))
@example("class FOO Bar {")
def test_export_macros_are_the_search_s(text):
    data = text.encode()
    assert export_macros(data) == [m.span(1) for m in EXPORT_MACRO.finditer(data)]


def test_export_macros_on_real_files():
    for text in [*REAL_FILES.values(), *MACRO_CASES]:
        data = text.encode()
        assert export_macros(data) == [m.span(1) for m in EXPORT_MACRO.finditer(data)]
    assert export_macros(MACRO_CASES[0].encode()) == [(6, 20)]


def test_a_kept_encoding_prices_the_segments_exactly():
    """whole_file's encoding of a file over budget is what count_batch reads the segments' counts off: the same
    counts as a counter that never saw the file, and the kept answer cannot be changed by its readers."""
    kept, fresh = counter_for("cl100k_base"), Counter(load("cl100k_base"))
    over = 0
    for name, text in REAL_FILES.items():
        if whole_file(text, kept, 64) is not None:
            continue
        over += 1
        assert kept.token_ends(as_doc(text)) is kept.token_ends(as_doc(text))
        assert not kept.token_ends(as_doc(text)).flags.writeable
        units = parse_units(text, kept.count_batch, False, 64)
        assert units.tokens == [fresh.count(t) for t in units.texts], name
    assert over > len(REAL_FILES) // 2
    short = "int a;\n"
    assert whole_file(short, kept, 64).tokens == fresh.count(short) == len(kept.token_ends(short))


def test_lines_of_are_the_segments_lines():
    counter = counter_for("cl100k_base")
    for name, text in REAL_FILES.items():
        fu = parse_units(text, counter.count_batch, True, 256)
        first = {}
        line = 1
        for i in fu.order:
            first[i] = line
            line += fu.texts[i].count("\n")
        for unit in fu.units:
            held = [s for s in unit.segments if fu.texts[s]]
            expected = (min(first[s] for s in held), max(first[s] + fu.texts[s].count("\n") - 1 for s in held)) \
                if held else None
            assert fu.lines_of(unit.segments) == expected, name


def test_lines_held_by_the_bodies_are_the_lines_counted():
    """file_stats given the docs' bodies says every line is kept only where counting them says so: docs as the
    chunker cuts them (basic: bodies tile the file), reordered (dep-aware: not shown, counted), and docs that lose
    a line or end one inside a doc (the next doc's first line would join it)."""
    counter, cuts = counter_for("cl100k_base"), dict.fromkeys(CUTS, 0)
    shown = 0
    for name, text in REAL_FILES.items():
        for mode, budget in (("basic", 128), ("basic", 1024), ("dep-aware", 256)):
            fu = parse_units(text, counter.count_batch, mode != "basic", budget)
            docs = Chunker(mode, budget, counter, Index({0: fu})).docs(0, name)
            texts, bodies, source = [d.text for d in docs], [d.lines for d in docs], fu.whole_text()
            if len(docs) < 2:
                continue
            lost = [*texts[:-1], texts[-1][:texts[-1].rstrip("\n").rfind("\n") + 1]]   # its last line gone
            joined = [texts[0].rstrip("\n"), *texts[1:]]   # its first doc's last line joins the next doc's first
            for variant in (texts, lost, joined):
                assert file_stats(source, variant, cuts, bodies) == file_stats(source, variant, cuts), (name, mode)
            lines = source.split("\n")[:-1]
            shown += _every_line_held(lines, texts, bodies)
            assert not _every_line_held(lines, lost, bodies) and not _every_line_held(lines, joined, bodies)
    assert shown >= len(REAL_FILES)


def test_a_pass_leaves_the_heap_as_it_found_it(tmp_path):
    """A pass freezes the heap it starts with and unfreezes it when it ends; a heap its caller froze stays frozen."""
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.cpp").write_text("int g();\nint f() { return g(); }\n")
    settings = {"mode": "compilable", "filters": "none", "redact": "none", "dedup": "exact"}
    assert gc.get_freeze_count() == 0
    chunk_to_jsonl(tmp_path / "a.jsonl", project_dirs=[tmp_path / "p"], **settings)
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        chunk_to_jsonl(tmp_path / "b.jsonl", project_dirs=[tmp_path / "p"], **settings)
        assert gc.get_freeze_count() == frozen > 0
    finally:
        gc.unfreeze()
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


CYCLE = CYCLE_OF_BASES + """int use() {
  Left l;
  Right r;
""" + "\n".join(f"  l.left += {i} * (r.right ^ {i * 7});" for i in range(150)) + """
  return l.left + r.right;
}
"""


def test_levels_over_budget_are_skipped_as_fits_refuses_them(tmp_path, monkeypatch):
    """Compilable mode skips ordering a level whose units' tokens already pass the budget (Packer.over_budget):
    its docs and figures, type cycles included, are those of trying every level (real files, a cycle of bases in
    a function too big for any doc but alone). And no order of such a level fits."""
    texts = [*REAL_FILES.values(), CYCLE]
    inputs = write_jsonl(tmp_path / "in.jsonl", texts)
    settings = {"inputs": [inputs], "mode": "compilable", "workers": 1, "filters": "none", "redact": "none",
                "dedup": "exact"}
    refused, over_budget = [], Packer.over_budget

    def checked(self, builder, refs):
        if over_budget(self, builder, refs):
            refused.append(refs)
            shuffled = random.Random(len(refused)).sample(refs, len(refs))
            assert not any(self.fits(builder, order) for order in (refs, refs[::-1], shuffled))
            return True
        return False

    for budget in (256, 2048):
        monkeypatch.setattr(Packer, "over_budget", checked)
        summary = chunk_to_jsonl(tmp_path / "skip.jsonl", max_tokens=budget, **settings)
        monkeypatch.setattr(Packer, "over_budget", lambda *_: False)
        plain = chunk_to_jsonl(tmp_path / "plain.jsonl", max_tokens=budget, **settings)
        assert (tmp_path / "skip.jsonl").read_bytes() == (tmp_path / "plain.jsonl").read_bytes()
        assert summary["fidelity"] == plain["fidelity"]
        assert summary["fidelity"]["total"]["type_cycles"] == 1
    assert len(refused) > 20


@dataclass
class Row:
    name: str
    count: int
    flag: bool
    ratio: float
    tags: tuple
    items: list[int]


ROW = Codec(Row)


def test_bulk_checked_fields_fail_as_one_by_one():
    assert ROW.decode(ROW.encode(Row("a", 1, True, 2.0, ("x", (1,)), [3]))) == Row("a", 1, True, 2.0, ("x", (1,)), [3])
    with pytest.raises(TypeError, match=r"^Row.count: expected int, got bool"):
        ROW.encode(Row("a", True, True, 2.0, (), []))
    with pytest.raises(TypeError, match=r"^Row.flag: expected bool, got int"):
        ROW.encode(Row("a", 1, 1, 2.0, (), []))
    with pytest.raises(TypeError, match=r"^Row.items: expected list\[int\]"):
        ROW.encode(Row("a", 1, True, 2.0, (), [True]))
    with pytest.raises(TypeError, match=r"^Row.ratio: expected float, got int"):
        ROW.encode(Row("a", 1, True, 2, (), []))
    good = ROW.encode(Row("a", 1, True, 1e16, (), []))
    assert ROW.decode(good).ratio == 1e16 and type(ROW.decode(good).ratio) is float  # written as an int's digits
    for swapped in (b'"a",1,true', b'"a",true,true', b'1,1,true', b'"a",1,1'):
        wrong = good.replace(b'"a",1,true', swapped)
        if wrong != good:
            with pytest.raises(Undecodable):
                ROW.decode(wrong.replace(wrong[12:20], (len(wrong) - 20).to_bytes(8, "little")))


def test_parsed_files_round_trip():
    counter = counter_for("cl100k_base")
    for text in REAL_FILES.values():
        fu = parse_units(text, counter.count_batch, True, 256)
        back = UNITS.decode(UNITS.encode(fu))
        assert type(back) is FileUnits and back == fu
        assert UNITS.encode(back) == UNITS.encode(fu)

"""Docs are the source as written: a file that fits is its one doc byte for byte (a final newline added where it
has none); a file that is split is cut, never rewritten: each doc holds a body, lines [first, last] of its file as
they stand there, and the bodies of a file's docs, in order, are the file. The reordering modes place each unit as
its slice of the file, parted from a unit that is not next to it in the file by pack.SEPARATOR. Counts stay exact.
"""

from pathlib import Path

import pytest
from cpp_projects import LAYERS, STD_HEADERS, STD_SUBSET, read_docs, write_jsonl
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nanodata.pipeline.chunkbuild import chunk_to_jsonl
from nanodata.pipeline.chunking import pack as pack_module
from nanodata.pipeline.chunking.modes import Chunker, Index, as_doc
from nanodata.pipeline.chunking.pack import SEPARATOR, counter_for
from nanodata.pipeline.chunking.parse import parse_units

TESTS = Path(__file__).parents[2]
CPP = (".cpp", ".cc", ".h", ".hpp", ".tcc")
REAL_FILES = {**{str(p.relative_to(TESTS)): p.read_text() for p in sorted(TESTS.rglob("*")) if p.suffix in CPP},
              **{name: (STD_HEADERS / name).read_text() for name in STD_SUBSET}}

SIXTEEN = """#include <cstdio>

int add(int a, int b) {
  int c = a + b;

  return c;
}

int main() {
  int x = add(1, 2);
  printf("%d\\n", x);
  // done
  return 0;
}

"""


def basic_docs(text: str, budget: int, mode: str = "basic") -> list:
    counter = counter_for("cl100k_base")
    fu = parse_units(text, counter.count_batch, mode != "basic", budget)
    return Chunker(mode, budget, counter, Index({0: fu})).docs(0, "f.cpp")


def assert_cut_not_rewritten(text: str, budget: int) -> list:
    """The property, for one file at one budget (returns its docs)."""
    counter = counter_for("cl100k_base")
    docs = basic_docs(text, budget)
    written = as_doc(text)
    lines = written.splitlines(keepends=True)
    for doc in docs:
        assert doc.text.strip(), "a doc of nothing but whitespace"
        assert doc.tokens == counter.count(doc.text) <= budget
    if len(docs) == 1 and docs[0].kind == "file":
        assert docs[0].text == written and docs[0].lines == (1, len(lines))
        return docs
    at = 1
    for doc in docs:
        first, last = doc.lines
        assert first == at, (first, at)  # no line skipped, none in two bodies
        assert "".join(lines[first - 1:last]) in doc.text  # the body, as written, inside its doc
        at = last + 1
    assert at == len(lines) + 1 or not written.strip()
    return docs


def test_a_fitting_file_is_its_doc_byte_for_byte(tmp_path):
    """The 16-line file with blank lines after the include, between and inside the functions: one doc, the file."""
    out = tmp_path / "out.jsonl"
    chunk_to_jsonl(out, inputs=[write_jsonl(tmp_path / "in.jsonl", [SIXTEEN, SIXTEEN.rstrip("\n")])],
                   mode="basic", max_tokens=16384, dedup="exact")
    docs = read_docs(out)
    assert [d["text"] for d in docs] == [SIXTEEN, SIXTEEN.rstrip("\n") + "\n"]
    assert docs[0]["lines"] == [1, SIXTEEN.count("\n")] and docs[1]["lines"] == [1, SIXTEEN.count("\n") - 1]
    assert docs[0]["n_tokens"] == counter_for("cl100k_base").count(SIXTEEN)


@pytest.mark.parametrize("budget", [256, 2048, 16384])
def test_every_real_file_is_cut_not_rewritten(budget):
    split = fitting = 0
    for text in REAL_FILES.values():
        docs = assert_cut_not_rewritten(text, budget)
        fitting += len(docs) == 1 and docs[0].kind == "file"
        split += len(docs) > 1
    assert split > 0 and (fitting > 0 or budget < 2048), (split, fitting)


LAYOUTS = {
    "crlf": SIXTEEN.replace("\n", "\r\n"),
    "no final newline": SIXTEEN.rstrip("\n"),
    "trailing spaces and tabs": SIXTEEN.replace(";\n", ";  \t\n").replace("{\n", "{\t\n"),
    "blank lines of whitespace": SIXTEEN.replace("\n\n", "\n   \n\t\n"),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("budget", [24, 40, 16384])
def test_line_ends_and_spaces_kept_as_written(layout, budget):
    docs = assert_cut_not_rewritten(LAYOUTS[layout], budget)
    assert (len(docs) == 1) == (budget == 16384)


def test_blank_lines_go_with_the_unit_before_and_comments_with_the_unit_after():
    text = "int a() { return 1; }\n\n\n// b's comment\nint b() { return 2; }\n"
    docs = basic_docs(text, 16)
    assert [d.text for d in docs] == ["int a() { return 1; }\n\n\n", "// b's comment\nint b() { return 2; }\n"]
    assert [d.lines for d in docs] == [(1, 3), (4, 5)]


def test_a_file_of_whitespace_makes_no_doc(tmp_path):
    out = tmp_path / "out.jsonl"
    summary = chunk_to_jsonl(out, inputs=[write_jsonl(tmp_path / "in.jsonl", [" \n\n\t\n", "int x;\n"])],
                             mode="basic", max_tokens=64, dedup="exact")
    assert [d["text"] for d in read_docs(out)] == ["int x;\n"]
    assert summary["fidelity"]["total"]["docs"] == summary["fidelity"]["total"]["balanced_docs"] == 1


def test_later_branches_of_an_if_chain_are_written_as_in_the_file():
    """Going from an #if branch to the next one inside a doc writes the `#else` line, as the file does, never
    `#endif` + `#if X` + `#else`."""
    text = ("#if defined(A)\nint f() { return 1; }\n\nint g() { return 2; }\n#elif defined(B)\nint f() { return 3; }\n"
            "#else\nint f() { return 4; }\n#endif\nint h() { return 5; }\n")
    for budget in (40, 60, 90):
        docs = assert_cut_not_rewritten(text, budget)
        assert all(d.text.count("#endif") <= 1 and d.text.count("#if") <= 1 for d in docs), budget


# ---------------------------------------------------------------- any layout (property)

PIECES = ["int a = 1;", "// note", "namespace n {", "}  // namespace n", "#if X", "#else", "#endif",
          "struct S {", "  int m;", "};", "void f() {", "  call();", "  if (x) {", "  }", "}", "/* c */", ""]


@st.composite
def layouts(draw):
    """A file of lines drawn from PIECES (unbalanced too: the parser recovers), each ended by LF or CRLF, with
    trailing whitespace and whitespace-only lines, the last line maybe unended."""
    lines = draw(st.lists(st.tuples(st.sampled_from(PIECES), st.sampled_from(["", " ", "\t", "  \t"]),
                                    st.sampled_from(["\n", "\r\n"])), min_size=1, max_size=40))
    text = "".join(p + pad + end for p, pad, end in lines)
    return text.rstrip("\n") if draw(st.booleans()) else text


@settings(max_examples=150, derandomize=True, deadline=None)
@given(layouts(), st.sampled_from([12, 20, 40, 100, 4096]))
@example("void f() {\n  call();\n\n  \n  call();\n}\n", 12)
@example("namespace n {\n#if X\nint a = 1;\n#else\nint a = 1;\n#endif\n}  // namespace n\n", 12)
def test_any_layout_is_cut_not_rewritten(text, budget):
    assert_cut_not_rewritten(text, budget)


# ---------------------------------------------------------------- reordering modes

@pytest.mark.parametrize("mode", ["dep-aware", "compilable"])
def test_each_unit_of_a_reordering_mode_is_its_slice_of_the_file(mode, monkeypatch, tmp_path):
    """Every unit placed in a doc is lines of its file as they stand there (blank lines inside it and its leading
    comment included), and SEPARATOR parts only units that are not next to each other in the file."""
    placed = []
    add = pack_module.DocBuilder.add

    def recording(self, scope, text, tokens, where=None, separator=None):
        placed.append((text, where, separator))
        return add(self, scope, text, tokens, where, separator)

    monkeypatch.setattr(pack_module.DocBuilder, "add", recording)  # (one worker: the run is in this process)
    texts = [*REAL_FILES.values(), *LAYERS.values()]
    counter = counter_for("cl100k_base")
    for budget in (512, 4096):
        out = tmp_path / f"{budget}.jsonl"
        chunk_to_jsonl(out, inputs=[write_jsonl(tmp_path / "in.jsonl", texts)], mode=mode, max_tokens=budget,
                       dedup="exact", workers=1, filters="none", redact="none")
        for doc in read_docs(out):
            assert doc["text"].strip() and doc["n_tokens"] == counter.count(doc["text"]) <= budget
    checked = separated = 0
    files = [as_doc(text).splitlines(keepends=True) for text in texts]  # (a file's gid is the run's: any file)
    for unit_text, (_, span), separator in placed:
        if span is not None and unit_text:
            assert any("".join(lines[span[0] - 1:span[1]]) == unit_text for lines in files), (unit_text, span)
            checked += 1
        separated += separator is not None
    assert checked > 1000 and separated > 0 and SEPARATOR == "\n"

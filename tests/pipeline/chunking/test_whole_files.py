"""Basic mode's fast path: a file that fits the budget is tokenized and emitted as one doc before any
parse (modes.whole_file, called by the pipeline), and that doc is byte for byte the one the parsed path
(Chunker.docs on the file's units) emits, with the same exact token count; a file that does not fit is left to
the parsed path, which then does not emit it whole either."""

from pathlib import Path

import pytest
from cpp_projects import LAYERS, STD_HEADERS, STD_SUBSET, read_docs, write_jsonl

from nanodata.pipeline.chunkbuild import chunk_to_jsonl
from nanodata.pipeline.chunking.fidelity import source_lines
from nanodata.pipeline.chunking.modes import Chunker, Index, as_doc, whole_file
from nanodata.pipeline.chunking.pack import counter_for
from nanodata.pipeline.chunking.parse import parse_units

CASES = Path(__file__).parent / "fidelity_cases"
REAL_FILES = {**{p.name: p.read_text() for p in sorted(CASES.iterdir())},
              **{name: (STD_HEADERS / name).read_text() for name in STD_SUBSET}, **LAYERS}


@pytest.mark.parametrize("budget", [256, 2048, 16384])
def test_the_fast_path_equals_the_parsed_path(budget):
    counter = counter_for("cl100k_base")
    emitted = 0
    for name, text in REAL_FILES.items():
        fast = whole_file(text, counter, budget)
        parsed = Chunker("basic", budget, counter, Index({0: parse_units(text, counter.count_batch, False, budget)}))
        docs = parsed.docs(0, name)
        if fast is None:
            assert not any(d.kind == "file" for d in docs), name
            continue
        emitted += 1
        fast.source = name
        assert docs == [fast], name
        assert fast.tokens == counter.count(fast.text) <= budget
        assert source_lines(fast.text) == source_lines(text)
    assert 0 < emitted < len(REAL_FILES)  # both paths taken


def test_a_file_over_budget_by_one_token_is_refused():
    """A file is counted whole: one token over the budget is refused, far over too, and one that fits exactly (or
    with a long last line) is one doc with its exact count."""
    counter = counter_for("cl100k_base")
    line = "int value_{} = compute({}, \"text\");\n"
    text = "".join(line.format(i, i) for i in range(400))
    tokens = counter.count(text)
    assert whole_file(text, counter, tokens - 1) is None and whole_file(text, counter, 16) is None
    assert whole_file(text, counter, tokens).tokens == tokens
    one_line = "\n\n  \n" + "x" * 5000 + "\n\t\n"
    assert whole_file(one_line, counter, 5000).text == one_line


def test_a_file_is_its_doc_as_read():
    """Only a final newline is ever added; a file of nothing but whitespace makes no doc."""
    assert as_doc("\n  \nint a;\r\n\t\n  b();\n\n}") == "\n  \nint a;\r\n\t\n  b();\n\n}\n"
    assert as_doc("int a;\n") == "int a;\n"
    assert whole_file(" \n\n\t", counter_for("cl100k_base"), 100) is None


def test_the_pipeline_emits_fitting_files_unparsed(tmp_path):
    """A run's fitting files come out as read, counted as a whole doc that balances and keeps its lines."""
    texts = ["int f() {\n\n  return 1;\n}\n", "#if X\nint g();\n#endif\n"]
    out = tmp_path / "out.jsonl"
    summary = chunk_to_jsonl(out, inputs=[write_jsonl(tmp_path / "in.jsonl", texts)], mode="basic", max_tokens=64)
    assert [d["text"] for d in read_docs(out)] == texts
    total = summary["fidelity"]["total"]
    assert total["docs"] == total["balanced_docs"] == 2 and total["lines_kept_pct"] == 100.0

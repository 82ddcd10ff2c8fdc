"""A doc's text is made of exact spans of its source: whole source lines, never re-spaced or re-joined;
a file holding a NUL byte anywhere is binary and dropped (the `binary` filter)."""

import json

import pytest
from cpp_projects import STD_HEADERS, STD_SUBSET, read_docs, write_jsonl, write_layers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanodata.pipeline.chunkbuild import chunk_to_jsonl

MODES = ["basic", "dep-aware", "cross-file", "compilable"]


def source_lines(*texts: str) -> set[str]:
    return {line for text in texts for line in text.split("\n")}


def foreign_lines(docs: list[dict], lines: set[str]) -> list[str]:
    """Lines of the docs that are not whole lines of the sources (a line longer than the budget is cut by
    characters: the pieces of a `split` doc may be parts of one), and docs of nothing but whitespace."""
    foreign = [d["text"] for d in docs if not d["text"].strip()]
    for d in docs:
        *whole, tail = d["text"].split("\n")
        for line in whole + ([tail] if tail else []):
            if line not in lines and not (d["kind"] == "split" and any(line in whole for whole in lines)):
                foreign.append(line)
    return foreign


def chunk_texts(tmp_path, texts: list[str], mode: str, max_tokens: int) -> list[dict]:
    src = write_jsonl(tmp_path / "in.jsonl", texts)
    out = tmp_path / f"{mode}-{max_tokens}.jsonl"
    # the chunker's own properties: junk text that StarCoder2's filters would drop must still be chunked whole
    chunk_to_jsonl(out, inputs=[src], mode=mode, max_tokens=max_tokens, filters="none", redact="none")
    return read_docs(out)


@pytest.mark.parametrize("mode", MODES)
def test_lines_sharing_nodes_keep_their_spaces(tmp_path, mode):
    text = ("@@@ junk\nint f() { return 1; }  // one\nint a; int b;\nusing namespace std; int main() {\n"
            "  return f();   \n}\nnamespace a { namespace b {\nint g() { return 2; }\n} }  // namespace a::b\n")
    docs = chunk_texts(tmp_path, [text], mode, 16)
    assert not foreign_lines(docs, source_lines(text))
    joined = "".join(d["text"] for d in docs)
    assert "@@@ junk\n" in joined and "@@@\njunk" not in joined
    assert "int f() { return 1; }  // one\n" in joined and "  return f();   \n" in joined


@pytest.mark.parametrize("mode", ["basic", "compilable"])
def test_real_headers_in_small_docs_are_whole_source_lines(tmp_path, mode):
    texts = [(STD_HEADERS / name).read_text() for name in STD_SUBSET[:5]]
    docs = chunk_texts(tmp_path, texts, mode, 96)
    assert len(docs) > 50 and any(d["kind"] == "split" for d in docs)
    assert not foreign_lines(docs, source_lines(*texts))


def test_project_modes_use_whole_lines_of_the_projects_files(tmp_path):
    root = write_layers(tmp_path / "layers")
    texts = [p.read_text() for p in sorted(root.rglob("*")) if p.is_file()]
    for mode in ("cross-file", "compilable", "project"):
        out = tmp_path / f"{mode}.jsonl"
        chunk_to_jsonl(out, project_dirs=[root], mode=mode, max_tokens=64)
        assert not foreign_lines(read_docs(out), source_lines(*texts))


PIECES = ["@@@", "junk", "{", "}", "namespace n", "int f()", "struct S", ";", "// c", "/* x */", " ", "  ", "\t",
          "#if X", "#endif", "return 1;", "a::b", "x = y + z;", "\r", "é"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.lists(st.sampled_from(PIECES), max_size=8).map("".join), min_size=1, max_size=30),
       final_newline=st.booleans(), max_tokens=st.integers(16, 40))
def test_any_text_comes_out_as_whole_lines(tmp_path, tokenizer, lines, final_newline, max_tokens):
    text = "\n".join(lines) + ("\n" if final_newline else "")
    if not text.strip():
        return
    docs = chunk_texts(tmp_path, [text], "basic", max_tokens)
    assert not foreign_lines(docs, source_lines(text))
    assert all(d["n_tokens"] == tokenizer.count_tokens(d["text"]) for d in docs)  # still exact counts


def test_nul_anywhere_is_a_binary_file(tmp_path):
    late_nul = "int f() { return 1; }\n" * 600 + "int g() { return '\0'; }\n"  # the NUL past 8 KiB
    assert late_nul.index("\0") > 8192
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps({"text": t, "path": p}) for t, p in
                             [(late_nul, "late.cpp"), ("int ok() { return 0; }\n", "ok.cpp")]) + "\n")
    tree = tmp_path / "tree" / "p"
    tree.mkdir(parents=True)
    (tree / "late.h").write_text(late_nul)
    (tree / "ok.h").write_text("int fine() { return 0; }\n")
    for name, kwargs in [("jsonl", {"inputs": [src]}), ("tree", {"project_dirs": [tmp_path / "tree"]})]:
        out = tmp_path / f"{name}.jsonl"
        summary = chunk_to_jsonl(out, **kwargs)
        docs = read_docs(out)
        assert docs and not any("\0" in d["text"] for d in docs)
        assert [d["source"] for d in docs] == [("ok.cpp" if name == "jsonl" else "p/ok.h")]
        assert summary["cleaning"]["dropped"]["binary"]["files"] == summary["files_dropped"] == 1

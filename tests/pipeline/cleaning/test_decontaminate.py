"""nanodata.pipeline.cleaning.decontaminate: StarCoder2-style benchmark decontamination on real C++ files."""

import glob
import gzip
import json
import pickle
import random
from pathlib import Path

import pytest

from nanodata import storage
from nanodata.errors import NanodataError
from nanodata.pipeline.cleaning.decontaminate import (
    KEY_BYTES,
    MIN_ITEM_BYTES,
    Decontaminator,
    _key_offset,
    load_items,
    normalize,
)
from nanodata.pipeline.cleaning.stages import Cleaning, Drop

# A HumanEval-X C++ canonical solution (CPP/0, has_close_elements) as the benchmark writes it ...
SOLUTION = ("    int i,j;\n    \n"
            "    for (i=0;i<numbers.size();i++)\n"
            "    for (j=i+1;j<numbers.size();j++)\n"
            "    if (abs(numbers[i]-numbers[j])<threshold)\n"
            "    return true;\n\n"
            "    return false;\n}\n\n")
# ... and as it might be pasted into a project: re-indented with tabs, spaces added, lines joined, CRLF.
PASTED = ("\tint i, j;\r\n\tfor (i = 0; i < numbers.size(); i++)\r\n\t\tfor (j = i + 1; j < numbers.size(); j++)"
          " if (abs(numbers[i] - numbers[j]) < threshold)\r\n\t\t\treturn true;\r\n\treturn false;\r\n}\r\n")
PROMPT = """/*
Check if in given vector of numbers, are any two numbers closer to each other than
given threshold.
>>> has_close_elements({1.0, 2.0, 3.0}, 0.5)
false
*/
#include<stdio.h>
#include<vector>
#include<math.h>
using namespace std;
bool has_close_elements(vector<float> numbers, float threshold){
"""


def real_cpp_file() -> str:
    """A real C++ source of some size: a libstdc++ header (any GCC version), read as the chunker would."""
    paths = sorted(glob.glob("/usr/include/c++/*/bits/stl_algo.h"))
    if not paths:
        pytest.skip("no libstdc++ headers (/usr/include/c++/*/bits) on this machine")
    return Path(paths[-1]).read_text(encoding="utf-8")


def write_items(path: Path, rows) -> str:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return str(path)


@pytest.fixture
def bench(tmp_path) -> str:
    return write_items(tmp_path / "cpp_benchmarks.jsonl", [
        {"task_id": "CPP/0/prompt", "text": PROMPT},
        {"task_id": "CPP/0/solution", "text": SOLUTION},
        {"task_id": "CPP/2/solution", "text": "    return number-int(number);\n}\n"},  # 23 bytes: too short
    ])


def test_a_real_file_with_a_pasted_solution_is_dropped_naming_the_item(bench):
    header = real_cpp_file()
    cut = header.index("\n", len(header) // 2) + 1  # inside the file, between two lines
    contaminated = header[:cut] + PASTED + header[cut:]
    decon = Decontaminator((bench,))

    assert decon.keep("stl_algo.h", header) is None
    drop = decon.keep("stl_algo.h", contaminated)
    assert isinstance(drop, Drop)
    assert (drop.reason, drop.item) == ("decontaminated", "CPP/0/solution")
    assert "CPP/0/solution" in drop.figure and f"{bench}:2" in drop.figure
    # the Cleaning slot reports it the same way
    assert Cleaning(filters=(decon,)).clean("stl_algo.h", contaminated) == (None, drop, {})


def test_the_prompt_is_an_item_of_its_own(bench):
    decon = Decontaminator((bench,))
    drop = decon.keep("a.cpp", "// my homework\n" + PROMPT.replace("\n", "\n  ") + "  return false;\n}\n")
    assert drop is not None and drop.item == "CPP/0/prompt"


def test_short_items_are_ignored(bench):
    items = load_items((bench,))
    assert [item.matchable for item in items] == [True, True, False]
    assert len(normalize(items[2].text)) < MIN_ITEM_BYTES
    decon = Decontaminator((bench,))
    assert (decon.item_count, decon.matchable_count) == (3, 2)
    text = "double frac(double number) {\n    return number-int(number);\n}\n"
    assert decon.keep("frac.cpp", text) is None


def test_only_the_whole_item_matches_not_its_key_window(tmp_path):
    # The automaton holds one window of each item; a file that has the window but not the item is kept, and
    # one that has the window once out of place and then the whole item is still dropped.
    bench = write_items(tmp_path / "b.jsonl", [{"text": SOLUTION}])
    data = normalize(SOLUTION)
    offset = _key_offset(data)
    window = data[offset:offset + KEY_BYTES].decode()
    decon = Decontaminator((bench,))
    assert decon.keep("w.cpp", f"int f() {{ {window} }}\n") is None
    drop = decon.keep("w.cpp", f"{window}\n{window}\n// then\n{PASTED}")
    assert drop is not None and drop.item == f"{bench}:1"  # no id field: named FILE:LINE


def test_ids_come_from_the_first_id_field_present(tmp_path):
    bench = write_items(tmp_path / "b.jsonl", [
        {"name": "HumanEval_0_has_close_elements", "id": 7, "text": PROMPT},
        "",  # blank lines are skipped (they still count for line numbers)
        {"id": 7, "text": SOLUTION},
        {"text": "x" * 40},
    ])
    assert [(item.id, item.where) for item in load_items(bench)] == [
        ("HumanEval_0_has_close_elements", f"{bench}:1"), ("7", f"{bench}:3"), (f"{bench}:4", f"{bench}:4")]


def test_non_ascii_items_match(tmp_path):
    text = "// Renvoie la médiane des éléments: ≤ 3 comparaisons par élément\nint médiane(int* v);\n"
    bench = write_items(tmp_path / "b.jsonl", [{"task_id": "fr/1", "text": text}])
    drop = Decontaminator(bench).keep("m.cpp", "#pragma once\n" + text.replace(" ", "\n "))
    assert drop is not None and drop.item == "fr/1"


def test_compressed_item_files(tmp_path, bench):
    gz = tmp_path / "cpp_benchmarks.jsonl.gz"
    gz.write_bytes(gzip.compress(Path(bench).read_bytes()))
    decon = Decontaminator((str(gz),))
    assert decon.keep("a.cpp", "void f() {\n" + PASTED).item == "CPP/0/solution"


@pytest.mark.parametrize("lines, line, words", [
    (['{"text": "int main() { return 0; } // long enough to count"}', "{not json"], 2, "not a JSON line"),
    (['{"task_id": "A", "text": "x"}', '{"task_id": "B", "prompt": "x"}'], 2, 'no "text" key'),
    (['{"task_id": "A", "text": 17}'], 1, '"text" is int'),
    (["", '["text", "x"]'], 2, "not a JSON object"),
])
def test_bad_item_lines_are_one_line_errors_naming_file_and_line(tmp_path, lines, line, words):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(NanodataError) as info:
        Decontaminator((str(path),))
    message = str(info.value)
    assert f"{path}:{line}: " in message and words in message
    assert "\n" not in message


def test_missing_empty_and_non_utf8_files_are_one_line_errors(tmp_path):
    for setup, words in [
        (lambda p: None, "does not exist"),
        (lambda p: p.write_text("\n\n"), "no benchmark items"),
        (lambda p: p.write_bytes(b'{"text": "caf\xe9"}\n'), ":1: not UTF-8"),
        (lambda p: p.write_bytes(b"\x1f\x8b\x08\x00garbage"), "cannot read"),
    ]:
        path = tmp_path / ("items.jsonl.gz" if words == "cannot read" else "items.jsonl")
        path.unlink(missing_ok=True)
        setup(path)
        with pytest.raises(NanodataError) as info:
            Decontaminator((str(path),))
        assert str(path) in str(info.value) and words in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(NanodataError, match="no benchmark item files"):
        Decontaminator(())


def test_pickle_round_trip_leaves_the_automaton_behind(bench):
    decon = Decontaminator((bench,))
    assert decon.keep("a.cpp", PASTED) is not None  # the automaton is built here now
    blob = pickle.dumps(decon)
    assert len(blob) < 1000 and b"ahocorasick" not in blob
    worker = pickle.loads(blob)
    assert worker == decon and hash(worker) == hash(decon) and worker._index is None
    assert worker.keep("a.cpp", PASTED) == decon.keep("a.cpp", PASTED)
    assert worker.keep("a.cpp", real_cpp_file()) is None


def test_a_worker_refuses_item_files_changed_since_the_start(tmp_path, bench):
    blob = pickle.dumps(Decontaminator((bench,)))
    Path(bench).write_text(json.dumps({"task_id": "other", "text": "y" * 64}) + "\n")
    with pytest.raises(NanodataError, match="changed since the run started"):
        pickle.loads(blob).keep("a.cpp", PASTED)


def synthetic_items(n: int, seed: int = 0) -> list[str]:
    """n distinct C++-looking benchmark texts, 100-1,000 characters each, made of identifiers and punctuation."""
    rng = random.Random(seed)
    words = ["int", "auto", "for", "if", "return", "vector<int>", "size_t", "std::string", "numbers", "result",
             "=", "+=", "<", "(", ")", "{", "}", ";", "[i]", "0", "1", "i++", ".size()", "const", "&"]
    return [f"// task {i}\n" + " ".join(rng.choice(words) for _ in range(rng.randint(30, 300))) for i in range(n)]


def test_three_thousand_items(tmp_path):
    texts = synthetic_items(3000)
    bench = write_items(tmp_path / "many.jsonl", [{"task_id": f"T/{i}", "text": t} for i, t in enumerate(texts)])
    decon = pickle.loads(pickle.dumps(Decontaminator((bench,))))
    assert decon.matchable_count == 3000
    header = real_cpp_file()
    assert decon.keep("stl_algo.h", header) is None
    planted = texts[1234].replace(" ", "\n\t")
    drop = decon.keep("stl_algo.h", header[:5000] + planted + header[5000:])
    assert drop is not None and drop.item == "T/1234"


def test_item_files_on_gcs(gcs_bucket, bench):
    uri = f"gs://{gcs_bucket}/benchmarks/cpp.jsonl"
    storage.write_bytes(uri, Path(bench).read_bytes())
    decon = Decontaminator((uri,))
    assert [item.where for item in load_items(uri)][:2] == [f"{uri}:1", f"{uri}:2"]
    assert pickle.loads(pickle.dumps(decon)).keep("a.cpp", PASTED).item == "CPP/0/solution"
    storage.write_bytes(f"gs://{gcs_bucket}/benchmarks/bad.jsonl", b'{"text": "ok, fine, long enough to be kept"}\n{')
    with pytest.raises(NanodataError, match=f"gs://{gcs_bucket}/benchmarks/bad.jsonl:2: not a JSON line"):
        Decontaminator((f"gs://{gcs_bucket}/benchmarks/bad.jsonl",))
    with pytest.raises(NanodataError, match="no such object"):
        Decontaminator((f"gs://{gcs_bucket}/benchmarks/missing.jsonl",))

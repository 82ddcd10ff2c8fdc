"""Chunks are faithful to their source (issue 20), on real C++: the cases in fidelity_cases/ (license, includes,
macros, #if/#elif/#else with a namespace closed inside, namespace-scope declarations, a function and a class
bigger than the budget, a huge initializer, an ERROR region), libstdc++ headers and the fmt tree torch ships.

- Lines (fidelity.lines_kept): every non-blank line of every file reaches the file's docs, in every mode and
  budget. In basic mode they come in source order (fidelity.lines_in_order: the file's docs in output order
  hold its lines as a subsequence). The other modes reorder whole units by design (callees first, types
  first), so there order holds per unit: each unit's own lines are a subsequence of the file's docs.
- Balance (braces.balanced): every doc balances `{}` and `()`, except docs made by cutting a single statement
  bigger than the budget by lines (kind "split", counted as cut_docs in the summary). Nothing else is exempt.
- Budget: every doc within --max-tokens, n_tokens equal to a recount.
"""

import importlib.util
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from cpp_projects import STD_HEADERS, STD_SUBSET, read_docs
from hypothesis import given, settings
from hypothesis import strategies as st

from nanodata.pipeline.chunkbuild import chunk_to_jsonl
from nanodata.pipeline.chunking.bracefallback import _consistent
from nanodata.pipeline.chunking.braces import balanced
from nanodata.pipeline.chunking.fidelity import lines_in_order, lines_kept, source_lines
from nanodata.pipeline.chunking.lines import _line_texts
from nanodata.pipeline.chunking.modes import Chunker, Index
from nanodata.pipeline.chunking.pack import counter_for
from nanodata.pipeline.chunking.parse import parse_units
from nanodata.pipeline.chunking.syntax import parser
from nanodata.pipeline.chunking.treewalk import _balances_alone, _Builder, _recovered
from nanodata.settings import MODES

CASES = Path(__file__).parent / "fidelity_cases"
FMT = Path(importlib.util.find_spec("torch").submodule_search_locations[0]) / "include" / "fmt"  # found without importing torch


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> Path:
    """One project-dirs root: the cases, the libstdc++ subset, fmt (one project each)."""
    root = tmp_path_factory.mktemp("trees")
    shutil.copytree(CASES, root / "cases")
    (root / "libstdcxx").mkdir()
    for name in STD_SUBSET:
        shutil.copy(STD_HEADERS / name, root / "libstdcxx" / name)
    shutil.copytree(FMT, root / "fmt")
    return root


@pytest.fixture(scope="module")
def runs(trees, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("runs")
    found = {}
    for mode in MODES:
        for budget in (512, 2048):
            path = out / f"{mode}-{budget}.jsonl"
            # every source line, as written: big_table.cpp is a table StarCoder2's alpha rule drops, and a redacted
            # address would no longer be its source line (tests/pipeline/cleaning covers both)
            summary = chunk_to_jsonl(path, project_dirs=[trees], mode=mode, max_tokens=budget, filters="none",
                                     redact="none")
            found[mode, budget] = summary, read_docs(path)
    return found


def by_file(trees: Path, docs: list[dict]) -> dict[Path, list[str]]:
    texts = defaultdict(list)
    for doc in docs:
        texts[trees / doc["source"]].append(doc["text"])
    return texts


RUNS = [(mode, budget) for mode in MODES for budget in (512, 2048)]


@pytest.mark.parametrize("mode,budget", RUNS)
def test_every_line_kept(trees, runs, mode, budget):
    summary, docs = runs[mode, budget]
    texts = by_file(trees, docs)
    files = [p for p in sorted(trees.rglob("*")) if p.is_file()]
    assert len(files) > 25 and set(texts) == set(files)
    for path in files:
        source = path.read_text()
        lines = set(source_lines(source))
        # exact dedupe drops a doc that another file emitted first, byte for byte (torch's fmt headers all end in
        # the same `#else` / `#error` doc): such a doc, all of whose lines are this file's, counts for it too
        shared = [t for other, found in texts.items() if other != path for t in found if set(source_lines(t)) <= lines]
        assert lines_kept(source, texts[path] + shared) == len(source_lines(source)), path
        if mode == "basic":
            assert lines_in_order(source, texts[path]) == len(source_lines(source)), path
    assert summary["fidelity"]["total"]["lines_kept_pct"] == 100.0


@pytest.mark.parametrize("mode", MODES)
def test_each_unit_in_source_order(trees, runs, mode):
    """Modes that reorder units keep each unit's own lines (a split unit's pieces too) in source order."""
    _, docs = runs[mode, 512]
    texts = by_file(trees, docs)
    counter = counter_for("cl100k_base")
    for path in sorted(CASES.iterdir()):
        fu = parse_units(path.read_text(), counter.count_batch, split_bytes=256)
        for unit in fu.units:
            own = fu.text_of(unit)
            assert lines_in_order(own, texts[trees / "cases" / path.name]) == len(source_lines(own)), (path, own)


@pytest.mark.parametrize("mode,budget", RUNS)
def test_docs_balance_unless_a_statement_was_cut(runs, mode, budget, tokenizer):
    summary, docs = runs[mode, budget]
    unbalanced = [d for d in docs if not balanced(d["text"])]
    assert all(d["kind"] == "split" for d in unbalanced)
    assert len(unbalanced) <= summary["fidelity"]["total"]["cut_docs"]
    by_project = summary["fidelity"]["by_project"]
    assert by_project["cases"]["oversized_statement_cuts"] >= 1   # big_table.cpp's initializer
    # macro_error.cpp (it fits whole: basic mode emits it unparsed)
    assert by_project["cases"]["parse_error_regions"] >= (mode != "basic")
    assert by_project["libstdcxx"]["parse_error_regions"] >= 1
    for doc in docs:
        assert doc["n_tokens"] == tokenizer.count_tokens(doc["text"]) <= budget


def test_oversized_function_and_class_split_along_the_tree(trees, runs):
    _, docs = runs["basic", 512]
    dispatch = [d["text"] for d in docs if d["source"] == "cases/big_function.cpp" and d["kind"] == "split"]
    assert len(dispatch) >= 3
    for text in dispatch:  # namespace and signature re-opened, whole statements, closed by the source's lines
        assert text.startswith("namespace big {\n") and "int dispatch(int code, const std::string& name) {\n" in text
        assert text.endswith("}\n\n}  // namespace big\n") and balanced(text)
    assert any("    case 15: {\n" in t and "switch (code) {\n" in t for t in dispatch)  # case labels whole
    registry = [d["text"] for d in docs if d["source"] == "cases/big_class.h" and d["kind"] == "split"]
    assert len(registry) >= 2 and all(t.count("class Registry {\n") == 1 and t.endswith("};\n") for t in registry)


def test_else_branch_keeps_its_namespace_closer_in_place(runs):
    """A whole-file doc is the file's lines in source order: the `}` in the #if branch stays before #else."""
    _, docs = runs["basic", 2048]
    (doc,) = [d["text"] for d in docs if d["source"] == "cases/conditionals.h"]
    source = (CASES / "conditionals.h").read_text()
    assert source_lines(doc) == source_lines(source)
    assert doc.index("}  // namespace outer (early)\n#else\n}  // namespace outer\n#endif\n") > 0


def test_conditionals_reopened_in_every_doc(runs):
    _, docs = runs["basic", 512]
    texts = [d["text"] for d in docs if d["source"] == "cases/conditionals.h"]
    for text in texts:  # the include guard is re-opened and closed around every doc's units
        assert balanced(text)
        assert "#ifndef FIDELITY_CONDITIONALS_H\n" in text and text.endswith("#endif  // FIDELITY_CONDITIONALS_H\n")


SNIPPETS = [
    "// a comment\n", "/* block\n   comment */\n", "#include <vector>\n", "#define TWICE(x) ((x) * 2)\n",
    "#if defined(A)\n", "#else\n", "#endif\n", "namespace n {\n", "}  // namespace n\n", "int g = 1;\n",
    "int f(int x) {\n  if (x) {\n    return TWICE(x);\n  }\n  return 0;\n}\n",
    "struct S {\n  int a;\n  int b() const { return a; }\n};\n",
    "void loop() {\n" + "".join(f"  call_{i}({i}, \"}}\");\n" for i in range(30)) + "}\n",
    "MACRO_WITHOUT_SEMICOLON(x)\n", "\n",
]


@settings(max_examples=40, deadline=None)
@given(pieces=st.lists(st.sampled_from(SNIPPETS), min_size=1, max_size=25), budget=st.sampled_from([48, 96, 512]))
def test_any_file_keeps_its_lines_in_order(pieces, budget):
    """The chunker itself (before the writer drops duplicate docs) on files made of C++ pieces, nonsense too."""
    text = "".join(pieces)
    counter = counter_for("cl100k_base")
    fu = parse_units(text, counter.count_batch, with_references=False, split_bytes=budget // 2)
    docs = Chunker("basic", budget, counter, Index({0: fu})).docs(0, "f.cpp")
    texts = [d.text for d in docs]
    # (a file of nothing but blank lines makes no doc)
    assert lines_in_order(text, texts) == lines_kept(text, texts) == len(source_lines(text)) * bool(text.strip())
    assert all(d.tokens == counter.count(d.text) <= budget for d in docs)
    assert all(balanced(d.text) for d in docs if not d.cut) or not balanced(text)


def test_a_line_cut_across_docs_counts_as_kept():
    """A line longer than the budget is cut into pieces, one per doc (pack._cut_line): read in order, the pieces
    make the line again, so it is kept and in order; a piece alone is not the line."""
    source = "int a;\r\nint table[] = {1, 2, 3, 4};\r\nint b;\n"
    docs = ["int a;\r\nint table[] = {1, ", "2, 3, ", "4};\r\nint b;\n"]
    assert lines_kept(source, docs) == lines_in_order(source, docs) == 3
    assert lines_kept(source, docs[:2]) == 1


# a namespace closed in both branches of an #if: its structure breaks tree-sitter's tree, so the file is laid
# out from its braces (parse-error fallback)
FALLBACK_WITH_CONDITIONALS = """#ifndef PLATFORM_H
#define PLATFORM_H

namespace platform {

#if defined(USE_FAST_PATH)
""" + "".join(f"int fast_{i}(int x) {{\n  return x * {i} + lookup_{i}(x);\n}}\n\n" for i in range(40)) + """#else
int slow(int x) {
  return x;
}
#endif

#if defined(CLOSE_EARLY)
}  // namespace platform (early)
#else
}  // namespace platform
#endif

#endif  // PLATFORM_H
"""


def test_brace_fallback_docs_reopen_their_conditional():
    """A doc of a file laid out from its braces never starts inside an `#if` branch without its `#if` line
    (an `#else` or `#endif` with no `#if` before it in the doc): the `#if` ... `#endif` block is a scope."""
    counter = counter_for("cl100k_base")
    text = FALLBACK_WITH_CONDITIONALS
    for mode in ("basic", "dep-aware"):  # (local modes: an Index of one file)
        fu = parse_units(text, counter.count_batch, with_references=mode != "basic", split_bytes=256)
        assert fu.parse_error_regions == 1
        texts = [d.text for d in Chunker(mode, 256, counter, Index({0: fu})).docs(0, "f.cpp")]
        assert len(texts) > 3 and lines_kept(text, texts) == len(source_lines(text))
        for doc in texts:
            assert balanced(doc)
            opened = 0
            for line in source_lines(doc):
                directive = (line.split() or [""])[0]
                if directive in ("#if", "#ifdef", "#ifndef"):
                    opened += 1
                elif directive in ("#else", "#endif"):
                    assert opened, doc
                    opened -= directive == "#endif"
            assert opened == 0 and ("fast_" not in doc or "#if defined(USE_FAST_PATH)\n" in doc)


# the shape of libstdc++'s basic_string.h: the whole file in the `#else` branch of an ABI switch; the namespace
# closed in both branches of an #if makes the file fall back to its braces
ELSE_BRANCH_FILE = """#ifndef STR_H
#define STR_H

#if ! USE_NEW_ABI
# include "old_string.h"
#else
namespace text {

class big_string {
 public:
""" + "".join(f"  int member_{i}(int x) const {{\n    if (x > {i}) {{\n      return x - {i};\n    }}\n    return {i};\n  }}\n\n"
              for i in range(60)) + """};

#if defined(CLOSE_EARLY)
}  // namespace text (early)
#else
}  // namespace text
#endif
#endif  // USE_NEW_ABI

#endif  // STR_H
"""


@pytest.mark.parametrize("budget", [256, 512])
def test_brace_fallback_lays_out_a_later_branch_by_its_own_braces(budget):
    """The balance lexer reads only an #if's first branch, so to the brace fallback a later branch had no structure
    and was cut at any line (basic_string.h: a class cut mid-member, docs unbalanced). Each later branch is now read
    on its own: its docs hold whole members inside the class's opening and closing lines, and re-open the branch
    as the tree's layout does, `#if` then `#else`."""
    counter = counter_for("cl100k_base")
    fu = parse_units(ELSE_BRANCH_FILE, counter.count_batch, with_references=False, split_bytes=budget)
    assert fu.parse_error_regions == 1
    docs = Chunker("basic", budget, counter, Index({0: fu})).docs(0, "str.h")
    texts = [d.text for d in docs]
    lines = source_lines(ELSE_BRANCH_FILE)
    assert len(texts) > 5 and lines_kept(ELSE_BRANCH_FILE, texts) == lines_in_order(ELSE_BRANCH_FILE, texts) == len(lines)
    assert not any(d.cut for d in docs)
    for doc in texts:
        assert balanced(doc), doc
        if "member_" in doc:
            assert "#if ! USE_NEW_ABI\n#else\n" in doc and "class big_string {\n" in doc and doc.count("};") == 1, doc


def test_the_parse_error_probe_agrees_with_the_walk(trees):
    """parse_units sends a file to the brace fallback without walking its tree when a unit recovered from a parse
    error does not balance alone (_recovered names those units' ranges, _balances_alone judges them). That shortcut
    must agree with the check on the walked tree it stands for: on every file of the trees with parse errors, each
    range the probe names is a unit of the full walk, and a file the probe sends to the fallback is one whose walked
    units do not balance (_consistent)."""
    with_errors = shortcut = 0
    for path in sorted(p for p in trees.rglob("*") if p.is_file()):
        data = path.read_bytes()
        root = parser().parse(data).root_node
        if not root.has_error:
            continue
        builder = _Builder(data, False, 512)
        builder.walk(root.children, ())
        builder.flush(())
        spans = list(_recovered(root.children))
        ends = defaultdict(set)  # (a unit's end may take in a `;` after its node)
        for unit in builder.units:
            ends[unit.start].add(unit.end)
        assert all(any(end <= e for e in ends[start]) for start, end in spans), path
        with_errors += 1
        if not all(_balances_alone(data, *span) for span in spans):
            shortcut += 1
            texts, _ = _line_texts(data, builder.spans, builder.pairs)
            assert not _consistent(builder, texts), path
    assert with_errors > shortcut > 0  # both ways taken (6 of the 10 libstdc++ headers take the shortcut)


def _check_block(i: int) -> str:
    """One test block of a long test driver: a scope of its own with statements, a nested block and an #if."""
    return (f"\t{{\n\t\t// case {i}\n\t\tDocument doc;\n\t\tdoc.Parse(\"<e{i} a='{i}'/>\");\n"
            f"\t\tCheck(\"parse {i}\", false, doc.Error());\n"
            f"\t\tif (doc.Root() != nullptr) {{\n\t\t\tint value = doc.Root()->IntAttribute(\"a\");\n"
            f"\t\t\tCheck(\"value {i}\", {i}, value);\n\t\t}}\n"
            + (f"#if defined(_MSC_VER)\n\t\tCheck(\"msvc {i}\", true, doc.Quirk({i}));\n#else\n"
               f"\t\tCheck(\"other {i}\", true, doc.Plain({i}));\n#endif\n" if i % 3 == 0 else "")
            + "\t}\n\n")


# the shape of tinyxml2's xmltest.cpp: main() is thousands of lines of `{ ... }` blocks with `#if` sections inside
# them, one `#if` inside a call's arguments (which breaks tree-sitter's tree of the whole function: it was one
# "oversized statement" cut by lines), and an `#if 1` ... `#endif` around a run of blocks
LONG_DRIVER = ("#include <cstdio>\n#include \"doc.h\"\n\nint gPass = 0;\n\n"
               "int main(int argc, const char** argv) {\n"
               "\t#if defined(_MSC_VER) && defined(DEBUG)\n\t\tCheckpoint(&start);\n\t#endif\n\n"
               "\tFILE* fp = fopen(\"data.xml\", \"r\");\n\tif (!fp) {\n"
               "\t\tprintf(\"Error opening 'data.xml'.\\n\"\n\t#if defined(_MSC_VER)\n"
               "\t\t\t\"In Visual Studio set the working directory.\\n\"\n\t#endif\n\t\t);\n\t\texit(1);\n\t}\n\n"
               + "".join(_check_block(i) for i in range(40)) + "#if 1\n"
               + "".join(_check_block(i) for i in range(40, 80)) + "#endif\n\n"
               "\tswitch (argc) {\n" + "".join(f"\tcase {i}: {{\n\t\tauto run = [&](int k) {{\n\t\t\tif (k > {i}) {{\n"
                                                f"\t\t\t\treturn k - {i};\n\t\t\t}}\n\t\t\treturn k;\n\t\t}};\n"
                                                f"\t\tgPass += run({i});\n\t\tbreak;\n\t}}\n" for i in range(40))
               + "\t}\n\tprintf(\"Pass %d\\n\", gPass);\n\treturn 0;\n}\n")


@pytest.mark.parametrize("budget", [512, 2048])
@pytest.mark.parametrize("text", [LONG_DRIVER, LONG_DRIVER.replace("\t#if defined(_MSC_VER)\n\t\t\t\"In", "\t\t\t\"In")
                                  .replace("directory.\\n\"\n\t#endif\n", "directory.\\n\"\n")],
                         ids=["if-in-arguments", "tree-intact"])
def test_a_long_function_with_conditionals_in_its_blocks_splits_balanced(text, budget):
    """Every block is split between its statements, each piece inside the lines that open and close what encloses
    it, whether the tree lays the function out or (its tree broken by the `#if` inside a call) its braces do: no
    doc is cut by lines, every doc balances, every line is kept in order, within budget."""
    counter = counter_for("cl100k_base")
    assert counter.count(text) > 4 * budget
    for mode in ("basic", "dep-aware"):  # (local modes: an Index of one file)
        fu = parse_units(text, counter.count_batch, with_references=mode != "basic", split_bytes=budget)
        chunker = Chunker(mode, budget, counter, Index({0: fu}))
        docs = chunker.docs(0, "xmltest.cpp")
        texts = [d.text for d in docs]
        assert len(docs) > 3 and chunker.packer.stats["oversized_statement_cuts"] == 0
        assert not any(d.cut for d in docs) and all(balanced(t) for t in texts)
        assert lines_kept(text, texts) == len(source_lines(text))
        if mode == "basic":
            assert lines_in_order(text, texts) == len(source_lines(text))
        assert all(d.tokens == counter.count(d.text) <= budget for d in docs)
        assert all(t.startswith("int main(") for t in texts if "Check(" in t or "gPass += run" in t)

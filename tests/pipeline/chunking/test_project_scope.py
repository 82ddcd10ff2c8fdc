"""Names scoped to their project (issue 19), real tree-sitter on real C++.

A name resolves in its own project, then in the projects whose headers its file includes; never in
unrelated projects or vendored copies sitting beside it. Qualified uses match qualified definitions.
"""

import re
from collections import Counter

import pytest
from cpp_projects import STD_HEADERS, STD_SUBSET, read_docs

from nanodata.pipeline.chunkbuild import chunk_to_jsonl

# another slice of the real libstdc++: red-black trees and the containers on them (swap, operator==,
# _M_* helpers... share names with the project's), an unrelated project here
UNRELATED = ["stl_tree.h", "stl_map.h", "stl_set.h", "stl_multimap.h"]


def _copy(names, target, mark=None):
    """Real headers into a project dir; with `mark`, one comment changed per file (a vendored copy)."""
    target.mkdir(parents=True)
    for name in names:
        text = (STD_HEADERS / name).read_text()
        if mark is not None:
            text, n = re.subn(r"// ", f"// {mark} ", text, count=1)
            assert n == 1
        (target / name).write_text(text)


def _run(tmp_path, root, mode, max_tokens=1024, **kw):
    out = tmp_path / f"{root.name}-{mode}.jsonl"
    # the vendored copies are the point here: near-dedup would drop their docs (tests/pipeline/dedup tests that)
    summary = chunk_to_jsonl(out, project_dirs=[root], mode=mode, max_tokens=max_tokens, **{"dedup": "exact", **kw})
    return summary, read_docs(out)


def _of(docs, project):
    return Counter((d["source"], d["text"]) for d in docs if d["source"].startswith(project + "/"))


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """libstdcxx alone; and beside vendored_libstdcxx (sorts after it: dedupe keeps the project's
    own docs first) and an unrelated project."""
    alone, beside = tmp_path_factory.mktemp("alone"), tmp_path_factory.mktemp("beside")
    _copy(STD_SUBSET, alone / "libstdcxx")
    _copy(STD_SUBSET, beside / "libstdcxx")
    _copy(STD_SUBSET, beside / "vendored_libstdcxx", mark="vendored:")
    _copy(UNRELATED, beside / "rbtree")
    return alone, beside


@pytest.mark.parametrize("mode", ["cross-file", "compilable"])
def test_project_docs_identical_beside_a_vendored_copy_and_an_unrelated_project(trees, tmp_path, mode):
    alone, beside = trees
    summary_alone, docs_alone = _run(tmp_path / "a", alone, mode)
    summary_beside, docs_beside = _run(tmp_path / "b", beside, mode)
    mine = _of(docs_alone, "libstdcxx")
    assert mine == _of(docs_beside, "libstdcxx")
    # the copy and the project resolve the same way (their docs differ by the changed comments only)
    assert sum(_of(docs_beside, "vendored_libstdcxx").values()) > 0
    # names pulled across files at all (the test would pass vacuously otherwise)
    assert any(d["text"].count("\n}") > 1 for d in docs_alone if d["kind"] != "split")
    # ambiguity is counted per project, the same for the project and its copy
    ambiguous = summary_beside["ambiguous_by_project"]
    assert ambiguous["libstdcxx"] == ambiguous["vendored_libstdcxx"] == summary_alone["ambiguous_by_project"]["libstdcxx"]
    assert summary_beside["ambiguous_names"] == sum(ambiguous.values())


def _write(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


FSLIB = {  # a path::iterator-style nested class defined out of its class
    "fslib/include/fslib/path.h": """#pragma once
namespace fs {
class path {
 public:
  class iterator;
  int size() const { return n_; }
 private:
  int n_ = 0;
};
// walks the components of a path
class path::iterator {
 public:
  int component_index = 0;
  int next_component() { return ++component_index; }
};
}  // namespace fs
""",
}

APP = {  # includes fslib's header, but its iterators are other things
    "app/src/use.cpp": """#include "fslib/path.h"
#include <vector>
template <typename Container>
int count_all(const Container& c) {
  int n = 0;
  for (typename Container::iterator it = c.begin(); it != c.end(); ++it) ++n;
  return n;
}
int vector_sum(std::vector<int>& v) {
  std::vector<int>::iterator first = v.begin();
  return *first;
}
int path_size(const fs::path& p) { return p.size(); }
""",
}


def test_nested_iterator_is_not_pulled_by_an_unrelated_iterator(tmp_path):
    root = _write(tmp_path / "projects", {**FSLIB, **APP})
    _, docs = _run(tmp_path, root, "compilable", max_tokens=400)
    app = [d["text"] for d in docs if d["source"].startswith("app/")]
    assert any("int path_size(" in t and "class path {" in t for t in app)  # fs::path: included, pulled
    for name in ("int count_all(", "int vector_sum("):  # Container::iterator, std::vector<int>::iterator
        (doc,) = [t for t in app if name in t]
        assert "class path" not in doc


def test_unqualified_use_never_means_a_nested_type_defined_out_of_its_class(tmp_path):
    root = _write(tmp_path / "projects", {**FSLIB, "app/src/walk.cpp": """#include "fslib/path.h"
struct iterator_user { int k; };
int walk(iterator* it) { return 0; }
int walk_path(fs::path::iterator& it) { return it.next_component(); }
"""})
    _, docs = _run(tmp_path, root, "compilable", max_tokens=400)
    (walk,) = [d["text"] for d in docs if "int walk(" in d["text"]]
    assert "class path::iterator {" not in walk
    (walk_path,) = [d["text"] for d in docs if "int walk_path(" in d["text"]]
    assert walk_path.index("class path {") < walk_path.index("class path::iterator {")  # its class first


def test_qualified_use_picks_the_qualified_definition(tmp_path):
    root = _write(tmp_path / "projects", {
        "lib/a.h": "namespace net {\nstruct Status { int code = 0; };\n}\n",
        "lib/b.h": "namespace disk {\nstruct Status { long bytes = 0; };\n}\n",
        "lib/use.cpp": '#include "a.h"\nint check(net::Status s) { return s.code; }\n'
                       "int check_any(Status s) { return 1; }\n",
    })
    summary, docs = _run(tmp_path, root, "compilable", max_tokens=400)
    (check,) = [d["text"] for d in docs if "int check(" in d["text"]]
    assert "int code = 0;" in check and "long bytes" not in check
    (any_,) = [d["text"] for d in docs if "int check_any(" in d["text"]]
    assert "struct Status" not in any_  # unqualified: two candidates, neither pulled
    assert summary["ambiguous_by_project"] == {}  # net::Status and disk::Status differ by qualification


CORE = {
    "core/include/core/math.h": "#pragma once\nnamespace core {\nint core_add(int a, int b) { return a + b; }\n}\n",
    "core/src/twice.cpp": "int twice(int v) { return v + v; }\n",
    "core/src/twice2.cpp": "int twice(int v) { return 2 * v; }\n",
}


@pytest.mark.parametrize("mode", ["cross-file", "compilable"])
def test_definition_in_another_project_pulled_only_through_its_header(tmp_path, mode):
    root = _write(tmp_path / "projects", {
        **CORE,
        "app/main.cpp": '#include "core/math.h"\nint main() { return core::core_add(1, 2); }\n',
        "other/main.cpp": "int other_main() { return core_add(1, 2); }\n",   # never includes core's header
        "other/more.cpp": "int more() { return twice(3); }\n",
    })
    summary, docs = _run(tmp_path, root, mode, max_tokens=400)
    (app,) = [d["text"] for d in docs if d["source"] == "app/main.cpp"]
    assert "int core_add(int a, int b)" in app
    (other,) = [d["text"] for d in docs if d["source"] == "other/main.cpp"]
    assert "int core_add(" not in other.split("int other_main")[0]
    assert summary["ambiguous_by_project"] == {"core": 1}  # twice, defined twice in core


def test_output_identical_for_any_partition_size_and_workers(trees, tmp_path):
    _, beside = trees
    outputs = set()
    for partition_mb, workers in [(256, 1), (0.05, 2), (0.0001, 1)]:
        out = tmp_path / f"{partition_mb}-{workers}.jsonl"
        chunk_to_jsonl(out, project_dirs=[beside], mode="compilable", max_tokens=1024,
                       partition_mb=partition_mb, workers=workers)
        outputs.add(out.read_bytes())
    assert len(outputs) == 1


def test_each_jsonl_input_is_a_project(tmp_path):
    """Records without a repo belong to their input file: two inputs defining the same helper each
    pull their own (corpus-wide, the name would be ambiguous and pulled by neither)."""
    import json

    inputs = []
    for name, body in [("a.jsonl", "return v + 1;"), ("b.jsonl", "return v * 2;")]:
        records = [{"text": f"int helper(int v) {{ {body} }}\n", "path": "src/helper.cpp"},
                   {"text": "int top(int v) { return helper(v); }\n", "path": "src/top.cpp"}]
        inputs.append(tmp_path / name)
        inputs[-1].write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "out.jsonl"
    summary = chunk_to_jsonl(out, inputs=inputs, mode="cross-file", max_tokens=400, dedup="exact")  # tops are copies
    tops = [d["text"] for d in read_docs(out) if "int top(" in d["text"]]  # a.jsonl's, then b.jsonl's
    assert len(tops) == 2 and "return v + 1;" in tops[0] and "return v * 2;" in tops[1]
    assert summary["ambiguous_names"] == 0

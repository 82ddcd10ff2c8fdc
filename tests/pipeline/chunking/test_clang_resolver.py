"""The clang resolver wired into the chunker (`--resolver clang`): on C++ written for each test, every pull is the
definition the compiler binds, where the names rule sees an ambiguous name or a wrong one; a file clang cannot use
keeps the names rule; the docs are the same for any worker count and partition size; the cache never serves a
result made before a header changed."""

import json
import re
import textwrap
from pathlib import Path

import pytest

from nanodata.errors import NanodataError
from nanodata.pipeline.chunkbuild.executor import chunk_to_jsonl

FILES = {
    "store.h": """\
        #pragma once
        namespace alpha {
        struct Store {
          int Get(int key);
        };
        }  // namespace alpha
        namespace beta {
        struct Store {
          int Get(int key);
        };
        }  // namespace beta
        int scale(int x);
        double scale(double x);
        int count(int n);
        int unique_helper(int n);
        """,
    "store.cc": """\
        #include "store.h"

        namespace alpha {
        int Store::Get(int key) {
          return key * 2 + 1;  // alpha's Get
        }
        }  // namespace alpha

        namespace beta {
        int Store::Get(int key) {
          return key * 3 + 2;  // beta's Get
        }
        }  // namespace beta
        """,
    "scale.cc": """\
        #include "store.h"

        int scale(int x) {
          return x * 10;  // int scale
        }

        double scale(double x) {
          return x * 0.5;  // double scale
        }

        int count(int n) {
          return n + 100;  // the project's count
        }

        int unique_helper(int n) {
          return n - 7;  // unique helper
        }
        """,
    "use_alpha.cc": """\
        #include "store.h"

        int use_alpha(alpha::Store& s) {
          return s.Get(1);
        }
        """,
    "use_beta.cc": """\
        #include "store.h"

        int use_beta(beta::Store& s) {
          return s.Get(2);
        }
        """,
    "use_int.cc": """\
        #include "store.h"

        int use_int() {
          return scale(3);
        }
        """,
    "use_double.cc": """\
        #include "store.h"

        double use_double() {
          return scale(2.0);
        }
        """,
    "use_std.cc": """\
        #include <algorithm>
        #include <vector>

        int use_std(const std::vector<int>& v) {
          return static_cast<int>(std::count(v.begin(), v.end(), 3));
        }
        """,
    "pool.h": """\
        #pragma once
        template <int N>
        struct Pool {
          int Take();
        };

        template <int N>
        int Pool<N>::Take() {
          return N * 4;  // pool take
        }
        """,
    "use_pool.cc": """\
        #include "pool.h"

        int use_pool() {
          Pool<8> pool;
          return pool.Take();
        }
        """,
    "broken.cc": """\
        #include "store.h"
        #include "not_there.h"

        int use_helper() {
          return unique_helper(1);
        }
        """,
}
ALPHA, BETA = "alpha's Get", "beta's Get"


def _tree(root: Path, files: dict[str, str] = FILES) -> Path:
    for rel, text in files.items():
        path = root / "proj" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return _tree(tmp_path_factory.mktemp("clang_tree"))


def _run(tree: Path, out: Path, **settings) -> dict:
    settings = {"mode": "cross-file", "max_tokens": 2048, "dedup": "exact", **settings}
    summary = chunk_to_jsonl(out, project_dirs=[tree], **settings)
    return summary


def _docs(out: Path) -> dict[str, str]:
    """The docs' text, joined per source file."""
    by_source: dict[str, str] = {}
    for line in out.read_text().splitlines():
        doc = json.loads(line)
        by_source[doc["source"]] = by_source.get(doc["source"], "") + doc["text"]
    return by_source


@pytest.fixture(scope="module")
def runs(tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("clang_runs")
    found = {}
    for mode in ("cross-file", "compilable"):
        for resolver in ("names", "clang"):
            summary = _run(tree, out / f"{mode}-{resolver}.jsonl", mode=mode, resolver=resolver)
            found[mode, resolver] = (_docs(out / f"{mode}-{resolver}.jsonl"), summary,
                                     (out / f"{mode}-{resolver}.jsonl").read_bytes())
    return found


@pytest.mark.parametrize("mode", ["cross-file", "compilable"])
def test_same_named_methods_each_pull_their_own_class_method(runs, mode):
    """alpha::Store::Get and beta::Store::Get are declared in a header and defined in store.cc: a caller in a third
    file pulls the one its typed object binds to; names finds `Get` twice and pulls neither."""
    clang, names = runs[mode, "clang"][0], runs[mode, "names"][0]
    assert ALPHA in clang["proj/use_alpha.cc"] and BETA not in clang["proj/use_alpha.cc"]
    assert BETA in clang["proj/use_beta.cc"] and ALPHA not in clang["proj/use_beta.cc"]
    for caller in ("proj/use_alpha.cc", "proj/use_beta.cc"):
        assert ALPHA not in names[caller] and BETA not in names[caller]


def test_an_overload_set_pulls_the_overload_each_call_binds(runs):
    clang, names = runs["cross-file", "clang"][0], runs["cross-file", "names"][0]
    assert "int scale" in clang["proj/use_int.cc"] and "double scale" not in clang["proj/use_int.cc"]
    assert "double scale" in clang["proj/use_double.cc"] and "int scale" not in clang["proj/use_double.cc"]
    assert "scale" not in names["proj/use_int.cc"].replace("scale(3)", "")


def test_a_call_of_an_instantiation_pulls_the_template_definition(runs):
    """pool.Take() binds to Pool<8>::Take, an instantiation with a USR of its own: the template's is pulled."""
    assert "pool take" in runs["cross-file", "clang"][0]["proj/use_pool.cc"]


def test_compilable_puts_the_bound_type_before_the_function(runs):
    """The type the parameter names (alpha::Store, from the header), and the method the call binds to, come before
    the function; beta's are not there."""
    doc = runs["compilable", "clang"][0]["proj/use_alpha.cc"]
    assert doc.index("namespace alpha {\nstruct Store") < doc.index(ALPHA) < doc.index("int use_alpha")
    assert "namespace beta" not in doc


def test_a_standard_library_call_pulls_nothing(runs):
    """std::count binds to the standard library: clang pulls nothing, where names pulls the project's `count`."""
    clang, names = runs["cross-file", "clang"][0], runs["cross-file", "names"][0]
    assert "the project's count" in names["proj/use_std.cc"]
    assert "the project's count" not in clang["proj/use_std.cc"]


def test_a_file_clang_cannot_use_falls_back_to_names_and_is_counted(runs):
    clang, summary = runs["cross-file", "clang"][0], runs["cross-file", "clang"][1]
    assert clang["proj/broken.cc"] == runs["cross-file", "names"][0]["proj/broken.cc"]
    assert "unique helper" in clang["proj/broken.cc"]  # names still pulls what it resolves
    figures = summary["clang"]["proj"]
    assert figures["files_names"] == figures["names: fatal error"] == 1
    assert figures["files_clang"] == len(FILES) - 1
    assert any("broken.cc" in e and "not_there.h" in e for e in figures["examples"])
    assert figures["pulls_gained"] > 0 and figures["references_bound_in_tree"] > 0


def test_names_is_the_default_and_untouched(runs, tree, tmp_path):
    _run(tree, tmp_path / "default.jsonl", mode="compilable")
    assert (tmp_path / "default.jsonl").read_bytes() == runs["compilable", "names"][2]
    assert "clang" not in runs["compilable", "names"][1]


@pytest.mark.parametrize("mode", ["cross-file", "compilable"])
def test_clang_docs_are_the_same_for_any_worker_count_and_partition_size(runs, tree, tmp_path, mode):
    _run(tree, tmp_path / "cut.jsonl", mode=mode, resolver="clang", workers=2, partition_mb=1e-6)
    assert (tmp_path / "cut.jsonl").read_bytes() == runs[mode, "clang"][2]


def test_a_header_change_invalidates_its_includers_cached_clang_results(tmp_path):
    """use_alpha.cc does not change, but the header it includes does (Get takes a long): its cached clang result
    binds the old USR, so the run reusing the cache must parse it again and pull the new definition."""
    root = _tree(tmp_path / "t")
    cache = {"cache": str(tmp_path / "cache"), "cache_secret": "s" * 32}
    _run(root, tmp_path / "first.jsonl", resolver="clang", **cache)
    for rel in ("store.h", "store.cc"):
        path = root / "proj" / rel
        path.write_text(path.read_text().replace("int Get(int key)", "int Get(long key)", 1)
                        .replace("int Store::Get(int key)", "int Store::Get(long key)", 1))
    _run(root, tmp_path / "cached.jsonl", resolver="clang", **cache)
    _run(root, tmp_path / "fresh.jsonl", resolver="clang")
    assert (tmp_path / "cached.jsonl").read_bytes() == (tmp_path / "fresh.jsonl").read_bytes()
    assert ALPHA in _docs(tmp_path / "fresh.jsonl")["proj/use_alpha.cc"]


CHAIN = {
    "store.h": FILES["store.h"],
    "scale.cc": FILES["scale.cc"],
    "chain.cc": """\
        #include "store.h"

        double halve_twice(double x) {
          return scale(scale(x));
        }
        """,
    "use_chain.cc": """\
        double halve_twice(double x);

        double use_chain() {
          return halve_twice(8.0);
        }
        """,
}


@pytest.mark.parametrize("mode", ["cross-file", "compilable"])
def test_a_pulled_definition_pulls_what_clang_binds_its_calls_to(tmp_path, mode):
    """use_chain() calls halve_twice() in chain.cc, which calls the double overload of scale: the second hop is
    clang's too (the double overload, not the int one; names finds scale twice and pulls neither)."""
    tree = _tree(tmp_path / "tree", CHAIN)
    docs = {}
    for resolver in ("clang", "names"):
        _run(tree, tmp_path / f"{resolver}.jsonl", mode=mode, resolver=resolver, cross_depth=2)
        docs[resolver] = _docs(tmp_path / f"{resolver}.jsonl")["proj/use_chain.cc"]
    assert "return scale(scale(x));" in docs["clang"] and "double scale" in docs["clang"]
    assert "int scale" not in docs["clang"]
    assert "return scale(scale(x));" in docs["names"] and "double scale" not in docs["names"]


@pytest.mark.parametrize(("settings", "says"), [
    ({"mode": "basic", "resolver": "clang"}, "--resolver clang: applies to the modes that pull"),
    ({"mode": "dep-aware", "resolver": "clang"}, "not --mode dep-aware"),
    ({"mode": "cross-file", "clang_timeout_s": 5}, "--clang-timeout-s 5: applies only with --resolver clang"),
])
def test_a_setting_that_means_nothing_in_the_run_is_refused_in_one_line(tree, tmp_path, settings, says):
    """Each is in the build's keys: ignored, it would only cost a rebuild and a cold cache."""
    with pytest.raises(NanodataError, match=re.escape(says)):
        _run(tree, tmp_path / "out.jsonl", **settings)
    assert not (tmp_path / "out.jsonl").exists()


def test_clang_without_a_local_tree_is_refused_and_beside_one_records_go_by_names(tree, tmp_path, caplog):
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({"text": "int f() { return 1; }\n", "path": "f.cc"}) + "\n")
    with pytest.raises(NanodataError, match="parses project trees on local disk"):
        chunk_to_jsonl(tmp_path / "a.jsonl", inputs=[records], mode="cross-file", resolver="clang")
    with pytest.raises(NanodataError, match="is in a bucket"):
        chunk_to_jsonl(tmp_path / "b.jsonl", project_dirs=["gs://bucket/trees"], mode="cross-file", resolver="clang")
    summary = chunk_to_jsonl(tmp_path / "c.jsonl", inputs=[records], project_dirs=[tree], mode="cross-file",
                             resolver="clang", dedup="exact")
    assert "the records of --inputs have no tree to parse in" in caplog.text
    fell_back = sum(figures.get("names: not a file of a local project tree", 0) for figures in summary["clang"].values())
    assert fell_back == 1


TEMPLATES = {
    "util.h": """\
        #pragma once
        int clamp_positive(int v);
        namespace my {
        template <typename T>
        T twice(T v) {
          return v + v;  // my twice
        }
        }  // namespace my
        """,
    "util.cc": """\
        #include "util.h"

        int clamp_positive(int v) {
          return v < 0 ? 0 : v;  // clamp positive
        }
        """,
    "process.cc": """\
        #include "util.h"

        template <typename T>
        T process(T v) {
          return clamp_positive(v) + my::twice(v);
        }

        int use_process() {
          return process(3);
        }
        """,
}


@pytest.mark.parametrize("mode", ["cross-file", "project"])
def test_a_call_that_depends_on_a_templates_arguments_is_resolved_by_names(tmp_path, mode):
    """clang binds no declaration to `clamp_positive(v)` inside a template whose v has a dependent type: that call
    goes by the names rule, as it did before clang, so the template's callee is still pulled."""
    tree = _tree(tmp_path / "tree", TEMPLATES)
    out = tmp_path / "clang.jsonl"
    summary = _run(tree, out, mode=mode, resolver="clang")
    assert sum(f.get("files_clang", 0) for f in summary["clang"].values()) == 3
    assert "clamp positive" in _docs(out)["proj/process.cc"]


def test_files_clang_parsed_with_errors_are_counted_with_their_first_error(tmp_path):
    """port.h declares its namespace only for a platform macro that inferred flags do not define: format.cc still
    parses (two errors, fewer than fall back) and counts as by clang, but the summary says it had errors."""
    root = _tree(tmp_path, {
        "port.h": """\
            #pragma once
            #ifdef PLATFORM_POSIX
            namespace port { inline int page() { return 4096; } }
            #endif
            """,
        "format.cc": """\
            #include "port.h"
            int block() { return port::page(); }
            int twice() { return 2 * port::page(); }
            """,
        "clean.cc": "int clean() { return 1; }\n",
    })
    figures = _run(root, tmp_path / "out.jsonl", resolver="clang")["clang"]["proj"]
    assert figures["files_clang"] == 3 and figures["files_clang_with_errors"] == 1
    assert figures["with_errors_examples"] == [
        "proj/format.cc: proj/format.cc:2: use of undeclared identifier 'port' (errors: 2)"]


def test_the_header_a_fallback_misses_is_counted_by_name(runs):
    """broken.cc includes a header the tree lacks: its fallback is counted under that header's name (a corpus
    missing a library shows as one header sending many files to names)."""
    figures = runs["cross-file", "clang"][1]["clang"]["proj"]
    assert figures["missing: not_there.h"] == 1
    assert not any(key.startswith("missing: ") for key in runs["cross-file", "names"][1].get("clang", {}).get("proj", {}))

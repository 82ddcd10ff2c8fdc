"""The clang resolver's core on C++ written for each test, parsed by the real libclang: what each reference binds
to, where the names resolver sees only an ambiguous name; fallbacks; flags; the walk's bounds."""

import json
import textwrap
from pathlib import Path

import pytest

from nanodata.pipeline.chunkbuild import clangindex as cx
from nanodata.pipeline.chunkbuild.globalindex import definitions, matching
from nanodata.pipeline.chunking.parse import parse_units
from nanodata.storage.plain import Codec


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


def _parse_all(root: Path, settings=None, pch_dir=None) -> dict[str, cx.FileResult]:
    settings = settings or cx.Settings()
    flags = cx.FlagSource(root, settings, pch_dir)
    return {rel: cx.parse_file(root, rel, flags.flags_for(rel), settings)
            for rel in sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.suffix in (".h", ".cc"))}


def _index(results) -> cx.UsrIndex:
    index = cx.UsrIndex()
    for result in results.values():
        index.add(result)
    return index


def _line_of(root: Path, rel: str, needle: str) -> int:
    lines = (root / rel).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


def _calls(result: cx.FileResult, index: cx.UsrIndex) -> dict[int, tuple[str, str, int]]:
    """line of a call -> (qualified name, file, first line) of the definition it resolves to."""
    return {ref.line: (d.qualified, d.path, d.first_line) for ref, d in cx.resolve(result, index) if ref.kind == "call"}


STORES = {
    "alpha/store.h": """\
        #pragma once
        namespace alpha {
        struct Store {
          int get() const;
          int base = 1;
        };
        }  // namespace alpha
        """,
    "beta/store.h": """\
        #pragma once
        namespace beta {
        struct Store {
          int get() const;
          int base = 2;
        };
        }  // namespace beta
        """,
    "alpha/store.cc": """\
        #include "alpha/store.h"
        namespace alpha {
        int Store::get() const { return base + 10; }
        }  // namespace alpha
        """,
    "beta/store.cc": """\
        #include "beta/store.h"
        namespace beta {
        int Store::get() const { return base + 20; }
        }  // namespace beta
        """,
    "main.cc": """\
        #include "alpha/store.h"
        #include "beta/store.h"
        int total() {
          alpha::Store a;
          beta::Store b;
          int x = a.get();  // alpha's
          return x + b.get();  // beta's
        }
        """,
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = _tree(tmp_path_factory.mktemp("stores"), STORES)
    return root, _parse_all(root)


def test_same_named_methods_bind_to_their_own_class(stores, tokenizer):
    root, results = stores
    assert all(not r.fallback for r in results.values()), {k: r.fallback for k, r in results.items()}
    calls = _calls(results["main.cc"], _index(results))
    # each call resolves, through the USR of the method its header declares, to the definition in its own .cc
    assert calls[_line_of(root, "main.cc", "alpha's")] == ("alpha::Store::get", "alpha/store.cc", 3)
    assert calls[_line_of(root, "main.cc", "beta's")] == ("beta::Store::get", "beta/store.cc", 3)
    # the names resolver sees `get` called unqualified (a member call) and two definitions of it: ambiguous
    count = lambda texts: [tokenizer.count_tokens(t) for t in texts]  # noqa: E731
    main = parse_units(STORES["main.cc"], count)
    assert next(u for u in main.units if u.name == "total").calls == ("get",)
    rows = [(gid, uid, chain, owner) for gid, rel in enumerate(["alpha/store.cc", "beta/store.cc"])
            for kind, name, uid, chain, owner, *_ in definitions(parse_units(STORES[rel], count)) if name == "get"]
    assert [chain for _, _, chain, _ in matching(rows, "function", (), ())] == ["alpha::Store", "beta::Store"]


def test_member_references_and_definitions(stores):
    root, results = stores
    index = _index(results)
    # a field is a definition of its own (inside its class): a member use binds to the right class's field
    used = {(d.qualified, d.kind) for ref, d in cx.resolve(results["alpha/store.cc"], index) if ref.kind == "member"}
    assert used == {("alpha::Store::base", "field_decl")}
    # the header declares get, the .cc defines it: the index holds the .cc's definition only
    get = next(d for d in results["alpha/store.cc"].definitions if d.name == "get")
    assert index.defs[get.usr] == [get]
    assert get.path == "alpha/store.cc" and get.kind == "cxx_method"
    header = results["alpha/store.h"]
    assert {d.qualified for d in header.definitions} == {"alpha::Store", "alpha::Store::base"}
    # the .cc's parse saw its header: a change to it changes the file's inputs
    assert [path for path, _ in results["alpha/store.cc"].includes] == ["alpha/store.h"]


def test_overloads_bind_each_call_to_its_overload(tmp_path):
    root = _tree(tmp_path, {
        "scale.h": """\
            #pragma once
            int scale(int v);
            double scale(double v);
            long scale(const char* v);
            """,
        "scale.cc": """\
            #include "scale.h"
            int scale(int v) { return v * 2; }
            double scale(double v) { return v * 3; }
            long scale(const char* v) { return v[0]; }
            """,
        "use.cc": """\
            #include "scale.h"
            double use() {
              return scale(1)  // int
                   + scale(2.5)  // double
                   + scale("x");  // text
            }
            """,
    })
    results = _parse_all(root)
    calls = _calls(results["use.cc"], _index(results))
    definition_line = lambda needle: _line_of(root, "scale.cc", needle)  # noqa: E731
    assert calls == {_line_of(root, "use.cc", "// int"): ("scale", "scale.cc", definition_line("int v")),
                     _line_of(root, "use.cc", "// double"): ("scale", "scale.cc", definition_line("double v")),
                     _line_of(root, "use.cc", "// text"): ("scale", "scale.cc", definition_line("char* v"))}
    assert len({d.usr for d in results["scale.cc"].definitions}) == 3


def test_standard_library_calls_bind_outside_the_project(tmp_path):
    root = _tree(tmp_path, {"sort.cc": """\
        #include <algorithm>
        #include <cstring>
        #include <vector>
        static int helper(int v) { return v + 1; }
        int sorted_first(std::vector<int> v, const char* s) {
          std::sort(v.begin(), v.end());
          return v[0] + static_cast<int>(std::strlen(s)) + helper(1);
        }
        """})
    result = _parse_all(root)["sort.cc"]
    assert not result.fallback
    outside = {r.usr for r in result.references if not r.in_project and r.kind == "call"}
    assert any("sort" in usr for usr in outside) and any("strlen" in usr for usr in outside)
    pairs = cx.resolve(result, _index({"sort.cc": result}))
    # what the file pulls is its own helper alone: the standard library's calls resolve to nothing
    assert {d.name for _, d in pairs if _.kind == "call"} == {"helper"}
    assert result.outside and result.includes == ()


def test_fatal_error_falls_back_with_a_reason(tmp_path):
    root = _tree(tmp_path, {
        "missing.cc": '#include "not_here.h"\nint f() { return 1; }\n',
        "garbage.cc": "".join(f"int x{i} = undeclared{i};\n" for i in range(40)),
        "fine.cc": "int g() { return 2; }\n",
    })
    results = _parse_all(root, cx.Settings(max_errors=5))
    missing = results["missing.cc"]
    assert missing.fallback == "fatal error at missing.cc:1: 'not_here.h' file not found"
    assert missing.definitions == () and missing.references == ()
    assert results["garbage.cc"].fallback.startswith("too many errors (")
    assert results["fine.cc"].fallback == "" and [d.name for d in results["fine.cc"].definitions] == ["g"]


def test_timeout_falls_back(tmp_path):
    root = _tree(tmp_path, {"slow.cc": "#include <map>\n#include <string>\nstd::map<std::string, int> m;\n"})
    settings = cx.Settings(timeout_s=1e-4)  # no parse of <map> and <string> takes a tenth of a millisecond
    result = _parse_all(root, settings)["slow.cc"]
    assert result.fallback.startswith("timeout: parse over")


def test_a_parse_that_ends_after_its_time_is_a_timeout_however_soon_it_ends(tmp_path):
    """A tiny file parses in well under a millisecond, often before the caller looks: finished late is still late,
    so the same time limit gives the same fallbacks whatever the machine's load (the docs depend on it)."""
    root = _tree(tmp_path, {"tiny.cc": "int f() { return 1; }\n"})
    settings = cx.Settings(timeout_s=1e-9)
    assert all(_parse_all(root, settings)["tiny.cc"].fallback.startswith("timeout") for _ in range(20))


def test_walk_skips_cursors_of_other_files(tmp_path):
    root = _tree(tmp_path, {
        "helpers.h": """\
            #pragma once
            inline int in_header() { return 7; }
            struct FromHeader { int f() { return in_header(); } };
            #define TWICE(x) twice_impl(x)
            int twice_impl(int);
            """,
        "body.inc": "int from_inc() { return in_header(); }\n",
        "main.cc": """\
            #include "helpers.h"
            namespace ns {
            #include "body.inc"
            int own() { return TWICE(in_header()); }
            }  // namespace ns
            """,
    })
    result = _parse_all(root)["main.cc"]
    assert [d.qualified for d in result.definitions] == ["ns::own"]
    assert {d.path for d in result.definitions} == {"main.cc"}
    line = _line_of(root, "main.cc", "int own")
    # every reference sits in main.cc's own code; the macro's call is recorded where the macro is used
    assert {(r.line, r.usr) for r in result.references} == {(line, "c:@F@twice_impl#I#"), (line, "c:@F@in_header#")}
    assert all(r.within == result.definitions[0].usr and r.in_project for r in result.references)


def test_compile_commands_give_the_flags(tmp_path):
    root = _tree(tmp_path, {
        "inc/api.h": "#pragma once\nint picked();\n",
        "src/pick.cc": """\
            #include "api.h"
            int a_way() { return 1; }
            int b_way() { return 2; }
            #ifdef USE_B
            int picked() { return b_way(); }
            #else
            int picked() { return a_way(); }
            #endif
            """,
    })
    inferred = _parse_all(root)["src/pick.cc"]  # finds inc/ (an #include names a header there), not USE_B
    assert [r.usr for r in inferred.references if r.kind == "call"] == ["c:@F@a_way#"]
    (root / "build").mkdir()
    (root / "build" / "compile_commands.json").write_text(json.dumps([{
        "directory": str(root / "build"), "file": "../src/pick.cc",
        "command": "c++ -DUSE_B -I../inc -std=c++17 -c ../src/pick.cc -o pick.o"}]))
    flags = cx.FlagSource(root)
    assert flags.origin == "build/compile_commands.json"
    assert flags.flags_for("src/pick.cc")[:3] == ("-DUSE_B", f"-I{root / 'inc'}", "-std=c++17")
    # a header: its nearest source's, in that source's language
    assert flags.flags_for("inc/api.h") == ("-x", "c++", *flags.flags_for("src/pick.cc"))
    result = cx.parse_file(root, "src/pick.cc", flags.flags_for("src/pick.cc"))
    assert [r.usr for r in result.references if r.kind == "call"] == ["c:@F@b_way#"]


def test_inferred_flags_find_the_project_include_dirs(tmp_path):
    root = _tree(tmp_path, {
        "include/lib/api.h": "#pragma once\nnamespace lib { int api(); }\n",
        "src/api.cc": '#include "lib/api.h"\nnamespace lib { int api() { return 3; } }\n',
        "src/nested/x.h": "#pragma once\n",
        "tools/use.cc": '#include "lib/api.h"\n#include "nested/x.h"\nint use() { return lib::api(); }\n',
    })
    flags = cx.FlagSource(root)
    assert flags.origin == "inferred"
    found = [f for f in flags.flags_for("tools/use.cc") if f.startswith("-I")]
    assert found == [f"-I{root}", f"-I{root / 'include'}", f"-I{root / 'src'}"]
    assert "-std=c++20" in flags.flags_for("tools/use.cc") and "-isystem" in flags.flags_for("tools/use.cc")
    results = _parse_all(root)
    assert _calls(results["tools/use.cc"], _index(results)) == {3: ("lib::api", "src/api.cc", 2)}


def test_results_are_plain_data_and_deterministic(stores):
    root, results = stores
    codec = Codec(cx.FileResult)
    for result in results.values():
        assert codec.decode(codec.encode(result)) == result
    flags = cx.FlagSource(root).flags_for("main.cc")
    assert cx.parse_file(root, "main.cc", flags) == results["main.cc"]
    # the text the chunker holds is what is parsed, not the file on disk
    edited = cx.parse_file(root, "main.cc", flags, text=STORES["main.cc"].replace("int total", "int sum"))
    assert [d.name for d in edited.definitions] == ["sum"] and edited.digest != results["main.cc"].digest


def test_standard_pch_changes_nothing_but_the_flags(tmp_path):
    root = _tree(tmp_path / "tree", {
        "names.h": """\
            #pragma once
            #include <string>
            #include <vector>
            namespace names {
            struct Names { std::vector<std::string> all; size_t size() const; };
            size_t longest(const Names& n);
            }
            """,
        "names.cc": """\
            #include "names.h"
            #include <algorithm>
            namespace names {
            size_t Names::size() const { return all.size(); }
            size_t longest(const Names& n) {
              size_t best = 0;
              for (const std::string& s : n.all) best = std::max(best, s.size());
              return best + n.size();
            }
            }
            """,
    })
    plain = _parse_all(root)
    with_pch = _parse_all(root, pch_dir=tmp_path / "pch")
    assert "-include-pch" in with_pch["names.cc"].flags
    assert [p.name.rsplit(".", 1)[-1] for p in sorted((tmp_path / "pch").iterdir())] == ["h", "inputs", "pch"]
    for rel, result in plain.items():
        assert not result.fallback and not with_pch[rel].fallback
        assert (with_pch[rel].definitions, with_pch[rel].references) == (result.definitions, result.references)
    calls = {d.qualified for _, d in cx.resolve(plain["names.cc"], _index(plain))}
    assert calls == {"names::Names", "names::Names::all", "names::Names::size"}


def test_dependency_projects_satisfy_includes(tmp_path):
    dep = _tree(tmp_path / "dep", {"include/dep/util.h": "#pragma once\nnamespace dep { int util(int v); }\n"})
    root = _tree(tmp_path / "app", {"main.cc": '#include "dep/util.h"\nint run() { return dep::util(1); }\n'})
    alone = cx.parse_file(root, "main.cc", cx.FlagSource(root).flags_for("main.cc"))
    assert alone.fallback == "fatal error at main.cc:1: 'dep/util.h' file not found"
    flags = cx.FlagSource(root, dependencies=(dep,)).flags_for("main.cc")
    assert f"-I{dep / 'include'}" in flags
    result = cx.parse_file(root, "main.cc", flags)
    # bound, to a declaration outside this project: the dependency's index is where it resolves
    assert [(r.kind, r.usr, r.in_project) for r in result.references] == [("call", "c:@N@dep@F@util#I#", False)]


def test_unreadable_compile_commands_leave_the_flags_inferred(tmp_path):
    root = _tree(tmp_path, {"a.cc": "int a() { return 1; }\n", "compile_commands.json": '[{"directory": "/"}]'})
    flags = cx.FlagSource(root)
    assert flags.origin == "inferred (compile_commands.json unreadable: KeyError: 'command')"
    assert not cx.parse_file(root, "a.cc", flags.flags_for("a.cc")).fallback


def _database(root: Path, command: str) -> None:
    """compile_commands.json with one entry per .cc/.c file of root, as `command {file} -o x.o` run in root."""
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.suffix in (".cc", ".c"))
    (root / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(root), "file": rel, "command": f"{command} -c {rel} -o /tmp/x.o"} for rel in files]))


def test_database_flags_find_the_system_headers_and_give_headers_their_language(tmp_path):
    """The wheel's libclang has no stddef.h of its own: a database's flags get the host compiler's system
    directories after their own. A header borrows a source's flags as C++ (clang takes a .h for C, where
    -std=c++17 is an error), without that source's path, -c or -o."""
    root = _tree(tmp_path / "db", {
        "include/sized.h": """\
            #pragma once
            #include <cstddef>
            namespace sized {
            class Buffer {
             public:
              std::size_t size() const { return n_; }
             private:
              std::size_t n_ = 0;
            };
            }  // namespace sized
            """,
        "src/sized.cc": '#include "sized.h"\nstd::size_t total(const sized::Buffer& b) { return b.size(); }\n',
    })
    _database(root, "c++ -std=c++17 -DSIZED=1 -Iinclude")
    flags = cx.FlagSource(root)
    own, borrowed = flags.flags_for("src/sized.cc"), flags.flags_for("include/sized.h")
    source = cx.parse_file(root, "src/sized.cc", own)
    assert (source.fallback, source.errors) == ("", 0)
    assert [r.usr for r in source.references if r.kind == "call"] == ["c:@N@sized@S@Buffer@F@size#1"]
    header = cx.parse_file(root, "include/sized.h", borrowed)
    assert (header.fallback, header.errors) == ("", 0)
    assert [d.qualified for d in header.definitions] == ["sized::Buffer", "sized::Buffer::size", "sized::Buffer::n_"]
    assert own[:3] == ("-std=c++17", "-DSIZED=1", f"-I{root / 'include'}")
    assert own[3] == "-isystem" and own[-len(cx.QUIET):] == cx.QUIET
    assert borrowed == ("-x", "c++", *own)
    assert not {"-c", "-o", "/tmp/x.o", "src/sized.cc", str(root / "src/sized.cc")} & set(borrowed)


def test_a_fatal_error_outside_the_project_names_its_file_absolute(tmp_path):
    outside = _tree(tmp_path / "vendor", {"vendor.h": '#pragma once\n#include "vendor_config.h"\n'})
    root = _tree(tmp_path / "app", {"app.cc": '#include "vendor.h"\nint app() { return 0; }\n'})
    _database(root, f"c++ -std=c++17 -I{outside}")
    result = cx.parse_file(root, "app.cc", cx.FlagSource(root).flags_for("app.cc"))
    assert result.fallback == f"fatal error at {outside / 'vendor.h'}:2: 'vendor_config.h' file not found"


def test_errors_count_up_to_the_limit_and_beyond_it_fall_back_as_too_many(tmp_path):
    """clang stops at 20 errors unless told: a file of 30 is parsed and counted, with its first error; over
    max_errors it falls back as too many errors."""
    root = _tree(tmp_path, {"thirty.cc": "".join(f"int x{i} = undeclared{i};\n" for i in range(30))
                            + "int fine() { return 1; }\n"})
    flags = cx.FlagSource(root).flags_for("thirty.cc")
    parsed = cx.parse_file(root, "thirty.cc", flags)
    assert (parsed.fallback, parsed.errors) == ("", 30)
    assert parsed.first_error == "thirty.cc:1: use of undeclared identifier 'undeclared0'"
    assert "fine" in [d.name for d in parsed.definitions]
    over = cx.parse_file(root, "thirty.cc", flags, cx.Settings(max_errors=25))
    assert over.fallback == "too many errors (more than 25)" and over.definitions == ()


def test_a_header_the_standard_pch_holds_is_parsed_without_it(tmp_path):
    """The project's stddef.h is found before the system's (the project's -I come first), so <cstddef> puts it in
    the standard-library PCH: its include guard, defined there, would hide its text (from an unsaved buffer
    clang loads nothing at all). It is parsed without the PCH; the other files keep it."""
    root = _tree(tmp_path / "tree", {
        "stddef.h": """\
            #ifndef SHIM_STDDEF_H
            #define SHIM_STDDEF_H
            #include_next <stddef.h>
            namespace shim { inline size_t twice(size_t n) { return 2 * n; } }
            #endif
            """,
        "use.cc": "#include <cstddef>\nstd::size_t four() { return shim::twice(2); }\n",
    })
    flags = cx.FlagSource(root, pch_dir=tmp_path / "pch")
    for text in ((root / "stddef.h").read_text(), None):
        result = cx.parse_file(root, "stddef.h", flags.flags_for("stddef.h"), text=text)
        assert (result.fallback, [d.qualified for d in result.definitions]) == ("", ["shim::twice"])
    assert "-include-pch" in flags.flags_for("use.cc") and "-include-pch" not in flags.flags_for("stddef.h")
    use = cx.parse_file(root, "use.cc", flags.flags_for("use.cc"))
    assert [r.usr for r in use.references if r.kind == "call"] == ["c:@N@shim@F@twice#l#"]

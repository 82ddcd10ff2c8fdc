"""Exact resolution with clang: each use bound to the declaration it means, by USR, as clangd's index does.

The names resolver (references.py, globalindex.py) matches a use to a definition by its name, so a name defined
twice in a project (two classes' `Get`, an overload set) is ambiguous and never pulled. Clang compiles each file
and binds every reference to one declaration; a declaration's USR (Unified Symbol Resolution: `c:@N@a@S@B@F@f#I#`)
names it identically in every file that sees it, so a call in x.cc to a method declared in x.h binds to the USR
that the method's definition in y.cc carries.

Three steps, each plain data (dataclasses of str, int, bool and tuples: nanodata.storage.plain can store them):
- `FlagSource`: a file's flags, from the project's compile_commands.json (in its root or build/; then the host
  compiler's system include directories; a header it does not list borrows a source's, in its language) or
  inferred (the directories of the project, and of the dependency projects given, that hold the headers its
  #includes name; -std; the host compiler's system include directories; optionally a precompiled header of the
  C++ standard library headers the project includes, built once per project: `standard_pch`; never for a file
  it holds);
- `parse_file`: one file -> `FileResult`: the definitions and the references of the file's own code (never the
  cursors of what it includes), what each reference binds to and whether that is in the project, the digests of
  the files the parse included; a file clang cannot use comes back with `fallback` saying why (never raises);
- `UsrIndex` (the reduce, per project: definitions only, added file by file) and `resolve` (a file's references
  -> the definitions they bind to).

Only the file's own code is walked: a .cc including <string> sees ~100 K declarations of the standard library, its
own code a few thousand cursors. libclang is used from its PyPI wheel (it bundles libclang.so, not clang's builtin
headers: the host compiler's include directories supply stddef.h and the like).
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import json
import os
import re
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import clang.cindex as ci

from nanodata.pipeline.chunkbuild.sources import Problem, tree_files
from nanodata.settings import CPP_EXTENSIONS
from nanodata.storage.files import atomic_output, commit, data_digest, file_digest, own_temp_name

K = ci.CursorKind
HEADER_EXTENSIONS = (".h", ".hh", ".hpp", ".hxx", ".ipp", ".tcc")
COMPILE_COMMANDS = ("compile_commands.json", "build/compile_commands.json")
# Warnings are not read, and typo correction would bind a misspelt name to a guess: both off.
QUIET = ("-Wno-everything", "-fno-spell-checking")
INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"\n]+)[>"]', re.M)

FUNCTIONS = frozenset({K.FUNCTION_DECL, K.CXX_METHOD, K.CONSTRUCTOR, K.DESTRUCTOR, K.CONVERSION_FUNCTION,
                       K.FUNCTION_TEMPLATE})
TYPES = frozenset({K.CLASS_DECL, K.STRUCT_DECL, K.UNION_DECL, K.ENUM_DECL, K.CLASS_TEMPLATE,
                   K.CLASS_TEMPLATE_PARTIAL_SPECIALIZATION, K.TYPEDEF_DECL, K.TYPE_ALIAS_DECL,
                   K.TYPE_ALIAS_TEMPLATE_DECL, K.CONCEPT_DECL})
# defined inside a definition that holds them (a class, an enum): a use of one pulls its holder
MEMBERS = frozenset({K.FIELD_DECL, K.ENUM_CONSTANT_DECL})
DEFINITIONS = FUNCTIONS | TYPES | MEMBERS | {K.VAR_DECL}
# what a reference cursor is, by its kind: a call is told by what it binds to (below)
REFERENCES = {K.DECL_REF_EXPR: "decl", K.MEMBER_REF_EXPR: "member", K.MEMBER_REF: "member", K.TYPE_REF: "type",
              K.TEMPLATE_REF: "type", K.CXX_BASE_SPECIFIER: "base", K.OVERLOADED_DECL_REF: "decl"}
# bound to these, a reference is to something local (a parameter, a template parameter): not a dependency
LOCAL_TARGETS = frozenset({K.PARM_DECL, K.TEMPLATE_TYPE_PARAMETER, K.TEMPLATE_NON_TYPE_PARAMETER,
                           K.TEMPLATE_TEMPLATE_PARAMETER})
SCOPES = frozenset({K.NAMESPACE}) | TYPES - {K.TYPEDEF_DECL, K.TYPE_ALIAS_DECL, K.TYPE_ALIAS_TEMPLATE_DECL}
WALK_CHECK_EVERY = 1024  # cursors between two looks at the clock

# clang_getInstantiationLocation as a prototype of its own (cindex's wraps the file in an object per call): the walk
# asks it of every cursor it meets
_expansion_file = ci.conf.lib["clang_getInstantiationLocation"]
_expansion_file.argtypes = [ci.SourceLocation, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_void_p]
_expansion_file.restype = None


@dataclass(frozen=True)
class Settings:
    std: str = "c++20"          # -std of inferred flags (compile_commands.json carries its own)
    timeout_s: float = 60.0     # per file, parse and walk together
    max_errors: int = 100       # more error diagnostics than this: the file falls back


@dataclass(frozen=True)
class Definition:
    usr: str
    kind: str                   # clang's cursor kind, lower case: cxx_method, class_decl, field_decl, ...
    name: str                   # spelling: `Get`, `DBImpl`
    qualified: str              # semantic scopes and name: `leveldb::DBImpl::Get`
    path: str                   # the file, relative to the project root
    start: int                  # byte offsets of its extent in the file (template<...> included)
    end: int
    first_line: int
    last_line: int


@dataclass(frozen=True)
class Reference:
    kind: str                   # call | type | base | member | decl
    usr: str                    # what it binds to
    offset: int                 # byte offset of the name in the file
    line: int
    within: str                 # USR of the innermost definition of this file holding it; '' at file scope
    in_project: bool            # what it binds to is declared in a file of the project


@dataclass(frozen=True)
class FileResult:
    path: str                   # relative to the project root
    digest: str                 # of the text parsed
    flags: tuple[str, ...]
    definitions: tuple[Definition, ...]
    references: tuple[Reference, ...]   # bound references to non-local declarations, in walk order
    unbound: int                # references clang could not bind (dependent names in templates, errors)
    includes: tuple[tuple[str, str], ...]  # (relative path, digest) of each project file the parse included
    outside: str                # one digest over the files outside the project it included
    errors: int                 # error diagnostics
    first_error: str = ""       # the first of them, `path:line: message` (path relative to the root, else absolute)
    fallback: str = ""          # why clang's result is not used; '' when it is
    # (name, offset) of each use clang left unbound because it depends on a template's arguments (`f(t)`, `t.f()`
    # in a template): the names rule still resolves these
    unbound_names: tuple[tuple[str, int], ...] = ()


# ---------------------------------------------------------------- flags

@functools.lru_cache(maxsize=1)
def host_include_dirs() -> tuple[str, ...]:
    """The host C++ compiler's system include directories, in search order (asked once); () without one."""
    try:
        run = subprocess.run(["c++", "-E", "-x", "c++", "-", "-v"], input="", capture_output=True, text=True,
                             timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    lines = run.stderr.splitlines()
    try:
        start = lines.index("#include <...> search starts here:") + 1
        end = lines.index("End of search list.", start)
    except ValueError:
        return ()
    return tuple(line.strip() for line in lines[start:end] if os.path.isdir(line.strip()))


def _absolute(args: list[str], directory: str) -> list[str]:
    """A compile command's arguments for parsing from elsewhere: no compiler, output, -c nor source file; include
    paths made absolute against the command's directory."""
    out, i = [], 1
    joined = ("-I", "-isystem", "-iquote", "-idirafter", "-include-pch", "-include", "-imacros")
    while i < len(args):
        arg = args[i]
        if arg in ("-c", "-o") or arg.startswith("-o") and len(arg) > 2:
            i += 2 if arg == "-o" else 1
            continue
        if arg in joined and i + 1 < len(args):
            out += [arg, os.path.normpath(os.path.join(directory, args[i + 1]))]
            i += 2
            continue
        spelled = next((p for p in joined if arg.startswith(p) and len(arg) > len(p)), None)
        out.append(spelled + os.path.normpath(os.path.join(directory, arg[len(spelled):])) if spelled else arg)
        i += 1
    return out


class FlagSource:
    """Flags per file of one project (`flags_for(rel)`): its compile_commands.json's, else inferred (once per
    project). With `pch_dir`, inferred flags load a precompiled header of the C++ standard library headers the
    project includes (`standard_pch`): built once per project, it spares each file parsing them again."""

    def __init__(self, root: str | os.PathLike, settings: Settings = Settings(), pch_dir: str | os.PathLike | None = None,
                 dependencies: tuple[str | os.PathLike, ...] = ()):
        self.root = os.path.realpath(root)
        self.settings = settings
        self.pch_dir = pch_dir
        # other projects' roots (those whose headers the project includes): their directories can satisfy its
        # #includes too, after its own (re2 includes absl/...: without abseil, every file of it falls back)
        self.dependencies = tuple(os.path.realpath(d) for d in dependencies)
        self.commands: dict[str, tuple[str, ...]] = {}  # relative path -> flags, from compile_commands.json
        self.origin = "inferred"
        for name in COMPILE_COMMANDS:
            path = os.path.join(self.root, name)
            if os.path.isfile(path):
                try:
                    self._load(path)
                    self.origin = name
                except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                    # the project's own file, as the corpus holds it: unusable, it leaves the flags inferred
                    self.commands.clear()
                    self.origin = f"inferred ({name} unreadable: {type(exc).__name__}: {exc})"
                break
        self._sources = sorted(self.commands)
        self._inferred: dict[str, tuple[str, ...]] = {}
        self._in_pch: set[str] = set()  # every tail of the path of each file the PCH holds (_suffixes)

    def _load(self, path: str) -> None:
        with open(path, encoding="utf-8") as f:
            entries = json.load(f)
        for entry in entries:
            directory = entry.get("directory", self.root)
            args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
            source = os.path.realpath(os.path.join(directory, entry["file"]))
            if source.startswith(self.root + os.sep):
                flags = [a for a in _absolute(args, directory)
                         if os.path.realpath(os.path.join(directory, a)) != source]
                # after the database's own: the wheel's libclang has no builtin headers (stddef.h) of its own
                self.commands.setdefault(os.path.relpath(source, self.root), (*flags, *_system(), *QUIET))

    def flags_for(self, rel: str) -> tuple[str, ...]:
        if rel in self.commands:
            return self.commands[rel]
        if self._sources and rel.endswith(HEADER_EXTENSIONS):
            # a header: the flags of the source file nearest it (longest common path, then path order), as clangd
            nearest = self._sources[max(range(len(self._sources)),
                                        key=lambda i: (len(os.path.commonpath([self._sources[i], rel])), -i))]
            # in the source's language: clang takes a .h for C, and a C++ -std there is an error
            return ("-x", "c" if nearest.endswith(".c") else "c++", *self.commands[nearest])
        language = "c" if rel.endswith(".c") else "c++"
        if not self._inferred:
            self._infer()
        if language == "c++" and rel in self._in_pch:
            # one of the PCH's own headers (a copy of the standard library's, or found first by a project -I):
            # its include guard is defined by the PCH, which would hide the file's whole text (and an unsaved
            # buffer of it fails the PCH's check of its inputs: no parse at all)
            return self._inferred["c++ without pch"]
        return self._inferred[language]

    def _infer(self) -> None:
        files, named = project_includes(self.root)
        found = [f"-I{os.path.join(self.root, d)}" if d else f"-I{self.root}" for d in include_dirs(files, named)]
        for dependency in self.dependencies:
            found += [f"-I{os.path.join(dependency, d)}" if d else f"-I{dependency}"
                      for d in include_dirs(_files(dependency), named)]
        system = _system()
        self._inferred["c"] = ("-x", "c", *found, *system, *QUIET)
        cxx = ("-x", "c++", f"-std={self.settings.std}", *found, *system, *QUIET)
        headers = standard_headers(named)
        pch, inputs = standard_pch(cxx, headers, self.pch_dir) if self.pch_dir is not None and headers else ((), ())
        self._inferred["c++"] = (*cxx, *pch)
        self._inferred["c++ without pch"] = cxx
        self._in_pch = {suffix for name in inputs for suffix in _suffixes(name)}


def _system() -> tuple[str, ...]:
    return tuple(arg for directory in host_include_dirs() for arg in ("-isystem", directory))


def _suffixes(path: str) -> set[str]:
    """Every tail of a path at a directory boundary: bits/move.h gives {bits/move.h, move.h}."""
    parts = path.strip(os.sep).split(os.sep)
    return {os.sep.join(parts[k:]) for k in range(len(parts))}


def project_includes(root: str) -> tuple[list[str], set[str]]:
    """The project's C++ files (relative paths) and every name its #includes give."""
    files = _files(root)
    named = {m.decode("utf-8", "replace") for rel in files for m in INCLUDE.findall(Path(root, rel).read_bytes())}
    return files, named


def _files(root: str) -> list[str]:
    return [rel for rel, _ in tree_files(root, CPP_EXTENSIONS) if not isinstance(rel, Problem)]


def include_dirs(files: list[str], named: set[str]) -> list[str]:
    """The project directories (relative, '' for the root) that hold a header the project's own #includes name:
    `#include "leveldb/db.h"` and include/leveldb/db.h give include/. The root always."""
    dirs = {""}
    for rel in files:
        parts = rel.split("/")
        for k in range(1, len(parts)):
            if "/".join(parts[k:]) in named:
                dirs.add("/".join(parts[:k]))
    return sorted(dirs)


def standard_headers(named: set[str]) -> list[str]:
    """The C++ standard library headers among included names (<vector>, <cstdint>): the host's libstdc++ (or
    libc++) directory holds them, and the standard makes each one usable on its own, in any order."""
    library = next((d for d in host_include_dirs() if re.search(r"/c\+\+/[^/]+$", d)), None)
    if library is None:
        return []
    return sorted(n for n in named if "." not in n and "/" not in n and os.path.isfile(os.path.join(library, n)))


def standard_pch(flags: tuple[str, ...], headers: list[str],
                 pch_dir: str | os.PathLike) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """("-include-pch", path) of a precompiled header including `headers` under `flags`, built when missing or
    when it no longer loads (clang checks the headers it was built from); its name is a digest of both. With it,
    the files it holds (real paths), listed beside it when built. ((), ()) when clang reports an error building
    it."""
    key = data_digest("\0".join([*flags, "", *headers]).encode())[:24]
    header, pch = Path(pch_dir, f"std-{key}.h"), Path(pch_dir, f"std-{key}.pch")
    listed = Path(pch_dir, f"std-{key}.inputs")
    use = ("-include-pch", str(pch))
    if pch.is_file() and listed.is_file() and _clean(Path(pch_dir, "empty.cc"), (*flags, *use), b""):
        return use, tuple(listed.read_text(encoding="utf-8").splitlines())
    Path(pch_dir).mkdir(parents=True, exist_ok=True)
    _create_once(header, "".join(f"#include <{h}>\n" for h in headers))
    tu = _clean(header, tuple("c++-header" if a == "c++" else a for a in flags))
    if tu is None:
        return (), ()
    inputs = tuple(sorted({os.path.realpath(i.include.name) for i in tu.get_includes()}))
    # workers may build them at the same moment: the last rename wins; the list first, as the PCH's presence
    # says the list is there
    with atomic_output(listed, "w", shared=True, durable=False, encoding="utf-8") as f:
        f.write("".join(f"{name}\n" for name in inputs))
    tmp = own_temp_name(pch)
    try:
        tu.save(str(tmp))
        commit(tmp, pch)
    finally:
        tmp.unlink(missing_ok=True)
    return use, inputs


def _clean(path: Path, flags: tuple[str, ...], text: bytes | None = None):
    """clang's translation unit of `path` (or of `text` under that name), None when it reports an error."""
    tu = ci.Index.create().parse(str(path), list(flags), unsaved_files=None if text is None else [(str(path), text)])
    return None if any(d.severity >= ci.Diagnostic.Error for d in tu.diagnostics) else tu


def _create_once(path: Path, text: str) -> None:
    """Write `path` whole unless it exists: never rewritten, as a PCH built from it checks its size and time."""
    tmp = own_temp_name(path)
    tmp.write_text(text, encoding="utf-8")
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()


# ---------------------------------------------------------------- the file pass

class _Parse(threading.Thread):
    """clang's parse in a thread, so that the caller can stop waiting for it (libclang has no timeout; a parse
    given up on finishes on its own and is dropped)."""

    def __init__(self, path: str, flags: tuple[str, ...], text: bytes | None):
        super().__init__(daemon=True)
        self.path, self.flags, self.text = path, flags, text
        self.tu = self.error = None

    def run(self):
        try:
            unsaved = [(self.path, self.text)] if self.text is not None else None
            self.tu = ci.Index.create().parse(self.path, list(self.flags), unsaved_files=unsaved, options=0)
        except ci.TranslationUnitLoadError as exc:
            self.error = f"clang could not load it ({exc})"


class _Timeout(Exception):
    pass


_DIGESTS: dict[tuple, str] = {}


def included_digest(path: str) -> str:
    """file_digest, kept per (path, size, mtime) for the process: every file of a project includes the same
    headers."""
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        if len(_DIGESTS) >= 65536:
            _DIGESTS.clear()
        _DIGESTS[key] = file_digest(path)
    return _DIGESTS[key]


@dataclass
class Loaded:
    """A parsed file before its walk (`load`): clang's translation unit, None when the file falls back, and what is
    known of its result already (digests, errors, the reason of a fallback)."""
    tu: object | None
    result: FileResult
    root: str
    deadline: float


def load(root: str | os.PathLike, rel: str, flags: tuple[str, ...], settings: Settings = Settings(),
         text: str | None = None) -> Loaded:
    """Parse project file `rel` (read from disk, or `text` when given: what the chunker holds); judge clang's
    diagnostics (a fatal error, more than settings.max_errors errors: a fallback)."""
    root = os.path.realpath(root)
    path = os.path.join(root, rel)
    data = text.encode("utf-8", "surrogateescape") if text is not None else Path(path).read_bytes()
    deadline = time.monotonic() + settings.timeout_s
    # clang's own limit (20 by default) above ours, or a fatal "too many errors emitted" would stop it first
    parse = _Parse(path, (*flags, f"-ferror-limit={settings.max_errors + 1}"), data if text is not None else None)
    parse.start()
    parse.join(settings.timeout_s)
    result = FileResult(rel, data_digest(data), flags, (), (), 0, (), "", 0)
    if parse.is_alive() or time.monotonic() > deadline:  # (a parse that just made it, late, is as late)
        return Loaded(None, _fallback(result, f"timeout: parse over {settings.timeout_s:g} s"), root, deadline)
    if parse.tu is None:
        return Loaded(None, _fallback(result, parse.error), root, deadline)
    tu = parse.tu
    errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    includes, outside = _includes(tu, root)
    first = f"{_at(errors[0], root, rel)}: {errors[0].spelling}" if errors else ""
    result = replace(result, includes=includes, outside=outside, errors=len(errors), first_error=first)
    if len(errors) > settings.max_errors:
        return Loaded(None, _fallback(result, f"too many errors (more than {settings.max_errors})"), root,
                      deadline)
    fatal = next((d for d in errors if d.severity == ci.Diagnostic.Fatal), None)
    if fatal is not None:
        return Loaded(None, _fallback(result, f"fatal error at {_at(fatal, root, rel)}: {fatal.spelling}"), root,
                      deadline)
    return Loaded(tu, result, root, deadline)


def _at(diagnostic, root: str, rel: str) -> str:
    """`path:line` of a diagnostic: relative to the root inside it, absolute outside (a system header)."""
    where = diagnostic.location
    if where.file is None:
        return rel
    name = os.path.realpath(where.file.name)
    return f"{os.path.relpath(name, root) if name.startswith(root + os.sep) else name}:{where.line}"


def walk(loaded: Loaded) -> FileResult:
    """The definitions and references of a loaded file's own code (a fallback as it is)."""
    if loaded.tu is None:
        return loaded.result
    walker = _Walk(loaded.tu, loaded.root, os.path.join(loaded.root, loaded.result.path), loaded.deadline)
    try:
        walker.run()
        if time.monotonic() > loaded.deadline:  # the clock is read every WALK_CHECK_EVERY cursors: and at the end
            raise _Timeout
    except _Timeout:
        return _fallback(loaded.result, "timeout: walk over the file's time")
    return replace(loaded.result, definitions=tuple(walker.definitions), references=tuple(walker.references),
                   unbound=walker.unbound, unbound_names=tuple(walker.unbound_names))


def parse_file(root: str | os.PathLike, rel: str, flags: tuple[str, ...], settings: Settings = Settings(),
               text: str | None = None) -> FileResult:
    """`load` then `walk`: the file pass. Never raises for what the file holds."""
    return walk(load(root, rel, flags, settings, text))


def _fallback(result: FileResult, reason: str) -> FileResult:
    return replace(result, definitions=(), references=(), unbound=0, unbound_names=(), fallback=reason)


def _includes(tu, root: str) -> tuple[tuple, str]:
    """(relative path, digest) of the project files the parse included, and one digest over the others."""
    inside, others = set(), set()
    for inclusion in tu.get_includes():
        name = os.path.realpath(inclusion.include.name)
        (inside if name.startswith(root + os.sep) else others).add(name)
    outside = "".join(f"{name}\t{included_digest(name)}\n" for name in sorted(others))
    return (tuple((os.path.relpath(n, root), included_digest(n)) for n in sorted(inside)),
            data_digest(outside.encode()))


class _Walk:
    """The cursors of one file's own code, depth first: definitions, and references with what they bind to."""

    def __init__(self, tu, root: str, path: str, deadline: float):
        self.tu, self.root, self.path, self.deadline = tu, root + os.sep, path, deadline
        self.definitions: list[Definition] = []
        self.references: list[Reference] = []
        self.unbound = 0
        self.unbound_names: list[tuple[str, int]] = []
        self.seen = 0
        self.rel = os.path.relpath(path, root)
        self._inside: dict[str, bool] = {}
        self._lines: list[int] | None = None

    def run(self) -> None:
        main = ctypes.cast(ci.conf.lib.clang_getFile(self.tu, self.path), ctypes.c_void_p).value
        location, out = ci.conf.lib.clang_getCursorLocation, ctypes.c_void_p()

        def own(cursor) -> bool:
            """Expanded in the file itself: its own code, macro expansions included (a gtest TEST, a CHECK), never
            what an #include brings (even one inside a namespace or a function)."""
            _expansion_file(location(cursor), ctypes.byref(out), None, None, None)
            return out.value == main

        self._own = own
        for cursor in self.tu.cursor.get_children():
            if own(cursor):
                self._visit(cursor, "", None, None)

    def _visit(self, cursor, within: str, body: tuple | None, skip: str | None) -> None:
        self.seen += 1
        if self.seen % WALK_CHECK_EVERY == 0 and time.monotonic() > self.deadline:
            raise _Timeout
        kind = cursor.kind
        if kind in DEFINITIONS and cursor.is_definition() and (kind is not K.VAR_DECL or body is None):
            usr = cursor.get_usr()
            if usr:
                self._define(cursor, kind, usr)
                if kind not in MEMBERS:
                    within = usr
                if kind in FUNCTIONS:
                    extent = cursor.extent
                    body = (extent.start.offset, extent.end.offset)
        elif kind in REFERENCES or kind is K.CALL_EXPR:
            skip = self._refer(cursor, kind, within, body, skip)
        for child in cursor.get_children():
            if self._own(child):
                self._visit(child, within, body, skip)

    def _define(self, cursor, kind, usr: str) -> None:
        extent = cursor.extent
        start, end = extent.start, extent.end
        self.definitions.append(Definition(usr, kind.name.lower(), cursor.spelling, _qualified(cursor), self.rel,
                                           start.offset, end.offset, start.line, end.line))

    def _refer(self, cursor, kind, within: str, body: tuple | None, skip: str | None) -> str | None:
        """Record one reference; returns the USR its children must not record again (a base specifier's type)."""
        target = cursor.referenced
        if target is None or kind is K.OVERLOADED_DECL_REF:
            if kind is not K.CALL_EXPR:  # a call's callee is a reference of its own, counted there
                self.unbound += 1
                if cursor.spelling:
                    self.unbound_names.append((cursor.spelling, cursor.location.offset))
            return skip
        tkind = target.kind
        if kind is K.CALL_EXPR and tkind is not K.CONSTRUCTOR or tkind in LOCAL_TARGETS:
            return skip
        target = _pattern(target) or target
        where = target.location
        tfile = where.file
        name = tfile.name if tfile is not None else ""
        if body is not None and name == self.path and body[0] <= where.offset < body[1]:
            return skip  # declared inside the function it is used in: a local
        usr = target.get_usr()
        if not usr:
            self.unbound += 1
            return skip
        if usr == skip:
            return skip
        if name not in self._inside:
            self._inside[name] = os.path.realpath(name).startswith(self.root) if name else False
        label = "call" if tkind in FUNCTIONS else REFERENCES.get(kind, "call")
        location = cursor.location
        self.references.append(Reference(label, usr, location.offset, location.line, within, self._inside[name]))
        return usr if kind is K.CXX_BASE_SPECIFIER else skip


def _pattern(target):
    """The template an implicit instantiation comes from, else None: a call of `f<int>` (or of a method of
    `Pool<64>`) binds to the instantiation, whose USR names its arguments, while the definition carries the
    template's. An explicit specialization is written elsewhere, and is its own definition."""
    template = ci.conf.lib.clang_getSpecializedCursorTemplate(target)
    if template is None:
        return None
    at = target.location  # an instantiation sits where the template's declaration or definition is written
    for written in (template, template.get_definition()):
        where = written.location if written is not None else None
        if where is not None and where.offset == at.offset and where.file is not None and at.file is not None \
                and where.file.name == at.file.name:
            return template
    return None


def _qualified(cursor) -> str:
    """The semantic scopes and name (`leveldb::DBImpl::Get` for an out-of-class definition too)."""
    names = [cursor.spelling]
    parent = cursor.semantic_parent
    while parent is not None and parent.kind in SCOPES:
        names.append(parent.spelling or "(anonymous)")
        parent = parent.semantic_parent
    return "::".join(reversed(names))


# ---------------------------------------------------------------- the reduce and the lookup

class UsrIndex:
    """USR -> the definitions of a project's files (the reduce): `add` each file's result as it comes; only the
    definitions are kept. A USR defined in two files (the same function for two platforms, a header parsed
    under two names) is ambiguous: a use resolves to the one in its own file, else to none."""

    def __init__(self):
        self.defs: dict[str, list[Definition]] = {}

    def add(self, result: FileResult) -> None:
        for definition in result.definitions:
            found = self.defs.setdefault(definition.usr, [])
            if definition not in found:
                bisect.insort(found, definition, key=lambda d: (d.path, d.start))

    def lookup(self, usr: str, path: str) -> Definition | None:
        found = self.defs.get(usr, ())
        if len(found) == 1:
            return found[0]
        own = [d for d in found if d.path == path]
        return own[0] if len(own) == 1 else None

    def ambiguous(self) -> int:
        return sum(len({d.path for d in found}) > 1 for found in self.defs.values())


def resolve(result: FileResult, index: UsrIndex) -> list[tuple[Reference, Definition]]:
    """Each reference of the file to a definition of the project, with that definition, in walk order."""
    pairs = []
    for reference in result.references:
        if reference.in_project:
            definition = index.lookup(reference.usr, result.path)
            if definition is not None:
                pairs.append((reference, definition))
    return pairs

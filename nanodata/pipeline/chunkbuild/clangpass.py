"""The clang resolver in the file pass: each file of a local project tree parsed by clangindex, its definitions and
bound references laid onto its tree-sitter units (the units are still what docs are made of, as written).

- flags: per project (a sub-directory of the input tree, as sources.tree_item names projects), its
  compile_commands.json's or inferred (clangindex.FlagSource: the project's include directories, then the input
  tree's, a recent -std, the host compiler's system directories), with a precompiled header of the standard
  library headers the project includes, built once per project per worker in the run's scratch directory;
- a definition belongs to the function or type unit whose bytes hold it (a method defined in its class: the
  class's unit); a reference to the unit holding it, kept when what it binds to is declared in the input tree (a
  standard-library call binds outside it: it pulls nothing);
- a file clang cannot use (no local tree, a fatal error, too many errors, a timeout) keeps the names rule: its
  units' `usrs` stay None; counted by reason, never dropped.

Reuse: clang's result is kept in the run's cache under the file's content and the flags that reached clang (the
PCH by its name, a digest of what it holds); it is used again only while every project file the parse included
still has the digest it had (a header's change invalidates its includers' entries). A timeout is never kept.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import re
import tempfile
from pathlib import Path

from nanodata.pipeline.chunkbuild import clangindex as cx
from nanodata.pipeline.chunkbuild.reuse import FileCache
from nanodata.pipeline.chunking.units import FileUnits
from nanodata.storage.files import data_digest
from nanodata.storage.plain import Codec

RESULT = Codec(cx.FileResult)
NO_TREE = "not a file of a local project tree"
FALLBACKS = ("fatal error", "too many errors", "timeout", "clang could not load it", NO_TREE)  # clangindex's reasons
EXAMPLES_KEPT = 10  # of each kind (fallbacks, pulls gained, lost, changed) per project
MISSING = re.compile(r"'([^']+)' file not found")  # clang's fatal error for an #include it cannot find


class ClangPass:
    """A worker's clang resolver: FlagSources per project, the PCH directory, clang's part of the cache."""

    def __init__(self, timeout_s: float, scratch: str | None, cache: FileCache | None):
        self.settings = cx.Settings(timeout_s=timeout_s)
        self.pch_dir = Path(scratch or tempfile.gettempdir(), "nanodata-clang-pch")
        self.cache = None if cache is None else dataclasses.replace(cache, codec=RESULT,
                                                                    schema=RESULT.fingerprint.hex())
        self.flags: dict[str, cx.FlagSource] = {}

    def resolve(self, src, fu: FileUnits, digest: str | None) -> tuple[list[tuple[str, int]], dict, bytes | None]:
        """Lay clang's result for file `src` (its units `fu`, its content digest when the run has a cache) onto
        `fu`: ([(USR, unit number)] of its definitions, its counts, the key of clang's cache entry used or None)."""
        where = _where(src)
        if where is None:
            return [], _counts(None, NO_TREE, src.source), None
        tree, project = where
        source = self.flags.get(project)
        if source is None:
            source = self.flags[project] = cx.FlagSource(project, self.settings, self.pch_dir,
                                                         (tree,) if tree != project else ())
        flags = source.flags_for(os.path.relpath(os.path.join(tree, src.path), project))
        key = None
        if self.cache is not None and digest is not None:
            named = tuple(os.path.basename(a) if a.endswith(".pch") else a for a in flags)  # not where it was built
            key = self.cache.key("clang", digest, data_digest("\0".join(named).encode()))
        result = self._load(key, tree)
        if result is None:
            result = cx.parse_file(tree, src.path, flags, self.settings, fu.whole_text())
            if key is not None and not result.fallback.startswith("timeout"):
                self.cache.save(key, result)
        if result.fallback:
            return [], _counts(result, result.fallback, src.source), key
        return annotate(fu, result), _counts(result, "", src.source), key

    def _load(self, key: bytes | None, tree: str) -> cx.FileResult | None:
        if key is None:
            return None
        stored, _ = self.cache.load(key)
        if stored is None:
            return None
        for rel, digest in stored.includes:
            path = os.path.join(tree, rel)
            if not os.path.isfile(path) or cx.included_digest(path) != digest:
                return None
        return stored


def _where(src) -> tuple[str, str] | None:
    """(the input tree's root, the file's project directory), or None for what is not a file of a local tree."""
    file = src.file
    if file is None or file[:3].lower() == "gs:" or not file.endswith(src.path):
        return None
    tree = os.path.realpath(file[:len(file) - len(src.path)] or ".")
    first, _, inner = src.path.partition("/")
    return tree, os.path.join(tree, first) if inner else tree


def annotate(fu: FileUnits, result: cx.FileResult) -> list[tuple[str, int]]:
    """Set each unit's usrs (bound references, in the input tree, to something outside the unit itself) and
    base_usrs; return the (USR, unit number) of each definition a function or type unit holds."""
    holders = [u for u, unit in enumerate(fu.units) if unit.kind in ("function", "type") and unit.name]
    starts = [fu.units[u].start for u in holders]
    every = sorted((unit.start, u) for u, unit in enumerate(fu.units) if unit.end > unit.start)
    every_units, every_starts = [u for _, u in every], [s for s, _ in every]

    def holder(offset: int, among: list[int], at: list[int]) -> int | None:
        i = bisect.bisect_right(at, offset) - 1
        u = among[i] if i >= 0 else None
        return u if u is not None and offset < fu.units[u].end else None

    defs, held = [], {}
    for d in result.definitions:
        u = holder(d.start, holders, starts)
        if u is not None:
            defs.append((d.usr, u))
            held[d.usr] = u
    used: list[dict] = [{} for _ in fu.units]
    bases: list[dict] = [{} for _ in fu.units]
    for ref in result.references:
        if not ref.in_project:
            continue
        u = holder(ref.offset, every_units, every_starts)
        if u is not None and held.get(ref.usr) != u:
            used[u][ref.usr] = None
            if ref.kind == "base":
                bases[u][ref.usr] = None
    unbound: list[dict] = [{} for _ in fu.units]
    for name, offset in result.unbound_names:
        u = holder(offset, every_units, every_starts)
        if u is not None:
            unbound[u][name] = None
    for u, unit in enumerate(fu.units):
        unit.usrs, unit.base_usrs, unit.unbound_calls = tuple(used[u]), tuple(bases[u]), tuple(unbound[u])
    return list(dict.fromkeys(defs))


def _counts(result: cx.FileResult | None, fallback: str, source: str) -> dict:
    """A file's figures for the summary: resolved by clang or by names (with the reason's kind and the file named),
    references bound, bound to a declaration in the input tree, left unbound; a file clang parsed with errors
    (fewer than fall back: its flags miss a macro or a directory, and part of it binds nothing) counted, with its
    first error."""
    if fallback:
        reason = next((kind for kind in FALLBACKS if fallback.startswith(kind)), fallback)
        counts = {"files_names": 1, f"names: {reason}": 1, "examples": [f"{source}: {fallback}"]}
        missing = MISSING.search(fallback)
        if missing:  # most fatal errors are a header the corpus lacks (a third-party library): said by name
            counts[f"missing: {missing.group(1)}"] = 1
        return counts
    counts = {"files_clang": 1, "references_bound": len(result.references),
              "references_bound_in_tree": sum(r.in_project for r in result.references),
              "references_unbound": result.unbound}
    if result.errors:
        counts |= {"files_clang_with_errors": 1,
                   "with_errors_examples": [f"{source}: {result.first_error} (errors: {result.errors})"]}
    return counts


def pull_changes(index, f: int, source: str, mode: str) -> dict:
    """What clang changes in file `f`'s pulls (modes.Index): for each unit its file's clang result binds, the
    definitions in other files it pulls directly (functions; types too in compilable mode) by clang against those the names rule
    resolves: gained, lost, and changed (a name that names resolved to one definition and clang to another)."""
    counts = {"pulls_clang": 0, "pulls_names": 0, "pulls_gained": 0, "pulls_lost": 0, "pulls_changed": 0}
    examples: dict[str, list] = {"gained": [], "lost": [], "changed": []}

    def shown(t) -> str:
        target = index.unit(t)
        return f"{target.owner}::{target.name}" if target.owner else target.name

    units = index.files[f].units
    for u, unit in enumerate(units):
        if unit.usrs is None or unit.kind not in ("function", "type"):
            continue
        ref = (f, u)
        kinds = (("function", unit.calls), ("type", unit.types))[:2 if mode == "compilable" else 1]
        clang = [t for kind, _ in kinds for t in index.bound(ref, kind) if t[0] != f]
        named = (index.resolve(kind, name, ref) for kind, used in kinds for name in used)
        names = list(dict.fromkeys(t for t in named if t is not None and t[0] != f and t != ref))
        counts["pulls_clang"] += len(clang)
        counts["pulls_names"] += len(names)
        gained = [t for t in clang if t not in names]
        lost = {index.unit(t).name: t for t in names if t not in clang}
        changed = [(lost.pop(index.unit(t).name), t) for t in gained if index.unit(t).name in lost]
        gained = [t for t in gained if t not in {new for _, new in changed}]
        where = f"{source}: {unit.name or unit.kind}"
        for what, found in (("gained", [shown(t) for t in gained]), ("lost", [shown(t) for t in lost.values()]),
                            ("changed", [f"{shown(old)} -> {shown(new)}" for old, new in changed])):
            counts[f"pulls_{what}"] += len(found)
            examples[what] += [f"{where} {'+' if what == 'gained' else '-' if what == 'lost' else ''}{x}"
                               for x in found][:EXAMPLES_KEPT - len(examples[what])]
    return {**counts, **{f"{what}_examples": listed for what, listed in examples.items() if listed}}


def add_resolver(by_project: dict, project: str, figures: dict) -> None:
    """A file's figures (ClangPass.resolve's, pull_changes') added to its project's: counts summed, the first
    EXAMPLES_KEPT examples of each kind kept."""
    mine = by_project.setdefault(project, {})
    for name, value in figures.items():
        if isinstance(value, list):
            kept = mine.setdefault(name, [])
            kept.extend(value[:EXAMPLES_KEPT - len(kept)])
        else:
            mine[name] = mine.get(name, 0) + value

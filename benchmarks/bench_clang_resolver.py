"""The clang resolver's file pass (chunkbuild.clangindex) against the names resolver's, on real trees.

Per tree, every C++ file (headers included: the chunker parses each file on its own), one process, CPU time
(process_time: libclang's parse runs in a thread of this process), each printed beside its reference from the same
run:
- clang, inferred flags: parse (`load`: libclang's parse and its diagnostics) and walk (`walk`: the file's own
  cursors) measured apart, in files per CPU-second (one core); goal: parse + walk >= 5 files/s per core; the same
  with the standard-library PCH (FlagSource's pch_dir: built once per tree, its time printed apart), and how many
  files' definitions and references come out identical with and without it;
- references: tree-sitter's parse of the same files (syntax.parse_tree) and the names resolver's file pass
  (parse.parse_units with references, cl100k_base counts);
- what clang binds: files that fall back (by reason), the share of references bound (to a declaration with a USR)
  and bound inside the project, the share of in-project references that resolve to a definition of the tree
  (UsrIndex), USRs defined in two files; beside the names the names resolver finds ambiguous (defined twice with
  one qualification: globalindex's rule);
- the chunker's file pass (pipeline.FileWorker.parse_file, cross-file, no cache) with --resolver clang (the tree
  one project: flags inferred, its PCH built at its first file, that included) beside --resolver names;
- preamble options on a sample of files (--sample), parse only: PARSE_PRECOMPILED_PREAMBLE with
  PARSE_CACHE_COMPLETION_RESULTS (the preamble built at the first parse), the same skipping function bodies in
  the preamble only (the headers' bodies; the file's own are kept), and a reparse of a file parsed with its
  preamble (what a preamble buys when the same file comes again).

Trees: the directories named, else NANODATA_BENCH_TREES (colon-separated), else /work/trees/leveldb and
/work/trees/re2 where they exist; skipped without any.

    .venv/bin/python benchmarks/bench_clang_resolver.py [TREE ...] [--sample 20]
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from collections import Counter
from importlib.metadata import version
from pathlib import Path

import clang.cindex as ci

from nanodata.pipeline.chunkbuild import clangindex as cx
from nanodata.pipeline.chunkbuild.config import ChunkConfig
from nanodata.pipeline.chunkbuild.globalindex import definitions
from nanodata.pipeline.chunkbuild.pipeline import FileWorker
from nanodata.pipeline.chunkbuild.sources import Problem, tree_files, tree_item
from nanodata.pipeline.chunking.pack import counter_for
from nanodata.pipeline.chunking.parse import parse_units
from nanodata.pipeline.chunking.syntax import parse_tree
from nanodata.settings import CPP_EXTENSIONS

DEFAULT_TREES = ("/work/trees/leveldb", "/work/trees/re2")
GOAL_FILES_PER_S = 5.0
MISSING = re.compile(r"'([^']+)' file not found")
CREATE_PREAMBLE_ON_FIRST_PARSE = 0x100  # CXTranslationUnit_CreatePreambleOnFirstParse (no name in cindex 18)
LIMIT_SKIP_FUNCTION_BODIES_TO_PREAMBLE = 0x800  # CXTranslationUnit_LimitSkipFunctionBodiesToPreamble
PREAMBLE = (ci.TranslationUnit.PARSE_PRECOMPILED_PREAMBLE | ci.TranslationUnit.PARSE_CACHE_COMPLETION_RESULTS
            | CREATE_PREAMBLE_ON_FIRST_PARSE)
HEADER_BODIES_SKIPPED = PREAMBLE | ci.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES | LIMIT_SKIP_FUNCTION_BODIES_TO_PREAMBLE


def _cpu(fn):
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def _rate(files: int, seconds: float) -> float:
    return files / seconds if seconds else float("inf")


def _line(name: str, measured: float, unit: str, reference: float, ref_unit: str, goal: float | None = None):
    goal_text = f" (goal >= {goal:g})" if goal is not None else ""
    print(f"  {name}: measured {measured:.2f} {unit} | reference {reference:.2f} {ref_unit} | "
          f"ratio {measured / reference:.2f}{goal_text}", flush=True)


def _clang_pass(root: str, files: list[str], flags: cx.FlagSource):
    """(results, (parse, walk) seconds of each file)."""
    results, seconds = [], []
    for rel in files:
        loaded, parse_s = _cpu(lambda rel=rel: cx.load(root, rel, flags.flags_for(rel)))
        result, walk_s = _cpu(lambda loaded=loaded: cx.walk(loaded))
        results.append(result)
        seconds.append((parse_s, walk_s))
    return results, seconds


def _rates(name: str, results, seconds, reference: float, ref_unit: str) -> None:
    """Parse, walk and both, over all files (a fallback at a missing include is quick) and over the used ones."""
    parse_s, walk_s = sum(p for p, _ in seconds), sum(w for _, w in seconds)
    used = [pw for r, pw in zip(results, seconds, strict=True) if not r.fallback]
    n = len(results)
    print(f"  {name}: parse {_rate(n, parse_s):.2f} files/s, walk {_rate(n, walk_s):.1f} files/s; the {len(used)} "
          f"files used alone: parse + walk {_rate(len(used), sum(p + w for p, w in used)):.2f} files/s", flush=True)
    _line(f"{name}, parse + walk, all files", _rate(n, parse_s + walk_s), "files/s per core", reference, ref_unit,
          GOAL_FILES_PER_S)


def _names_ambiguous(fus) -> int:
    """Names defined twice with one qualification in the tree (globalindex.build_index's `ambiguous_names`)."""
    seen = Counter((kind, name, chain) for fu in fus for kind, name, _, chain, *_ in definitions(fu))
    return len({(kind, name) for (kind, name, _), n in seen.items() if n > 1})


def _bindings(results) -> None:
    index = cx.UsrIndex()
    for result in results:
        index.add(result)
    used = [r for r in results if not r.fallback]
    reasons = Counter("missing include" if MISSING.search(r.fallback) else re.split(r" at | \(|:", r.fallback)[0]
                      for r in results if r.fallback)
    missing = Counter(m.group(1) for r in results for m in [MISSING.search(r.fallback)] if m)
    bound = sum(len(r.references) for r in used)
    unbound = sum(r.unbound for r in used)
    inside = sum(ref.in_project for r in used for ref in r.references)
    resolved = sum(len(cx.resolve(r, index)) for r in used)
    print(f"  clang: {len(used)} of {len(results)} files used; fallbacks {dict(reasons.most_common())}; headers "
          f"missing most often {dict(missing.most_common(4))}", flush=True)
    print(f"  references (non-local, in used files): {bound + unbound}; bound {bound / max(1, bound + unbound):.1%}; "
          f"bound inside the project {inside / max(1, bound + unbound):.1%}; of those, resolved to a definition of "
          f"the tree {resolved / max(1, inside):.1%}; definitions {sum(len(r.definitions) for r in used)}, "
          f"USRs defined in two files {index.ambiguous()}", flush=True)


def _preamble_options(root: str, files: list[str], flags: cx.FlagSource) -> None:
    def parse_all(options):
        return [ci.Index.create().parse(os.path.join(root, rel), list(flags.flags_for(rel)), options=options)
                for rel in files]

    _, plain = _cpu(lambda: parse_all(0))
    print(f"  preamble options, parse only, {len(files)} files: default {_rate(len(files), plain):.2f} files/s",
          flush=True)
    for name, options in (("PRECOMPILED_PREAMBLE + CACHE_COMPLETION_RESULTS", PREAMBLE),
                          ("the same, function bodies skipped in the preamble only", HEADER_BODIES_SKIPPED)):
        tus, seconds = _cpu(lambda options=options: parse_all(options))
        _line(name, _rate(len(files), seconds), "files/s", _rate(len(files), plain), "files/s (default)")
        if options == PREAMBLE:
            _, again = _cpu(lambda tus=tus: [tu.reparse() for tu in tus])
            _line("reparse of the same files with their preamble", _rate(len(files), again), "files/s",
                  _rate(len(files), plain), "files/s (default)")


def _chunker_pass(tree: Path, files: list[str], scratch: Path) -> None:
    parent = os.path.dirname(os.path.realpath(tree))
    items = [tree_item(parent, f"{tree.name}/{rel}", os.path.getsize(Path(tree, rel)), n, None)
             for n, rel in enumerate(files)]
    rates = {}
    for resolver in ("names", "clang"):
        worker = FileWorker({**ChunkConfig(mode="cross-file", resolver=resolver).worker_settings(),
                             "scratch": str(scratch / f"chunker-{tree.name}")})
        results, seconds = _cpu(lambda worker=worker: [worker.parse_file(item) for item in items])
        rates[resolver] = _rate(len(items), seconds)
        if resolver == "clang":
            clang = sum(r.resolver.get("files_clang", 0) for r in results if r.resolver)
            print(f"  chunker file pass: {clang} of {len(items)} files resolved by clang", flush=True)
    _line("chunker file pass, --resolver clang", rates["clang"], "files/s per core", rates["names"],
          "files/s (--resolver names)", GOAL_FILES_PER_S)


def bench_tree(tree: Path, sample: int, count_batch, scratch: Path) -> None:
    root = os.path.realpath(tree)
    files = [rel for rel, _ in tree_files(root, CPP_EXTENSIONS) if not isinstance(rel, Problem)]
    datas = [Path(root, rel).read_bytes() for rel in files]
    print(f"{tree}: {len(files)} files, {sum(map(len, datas)) / 1e6:.2f} MB", flush=True)

    _, ts_s = _cpu(lambda: [parse_tree(d) for d in datas])
    fus, names_s = _cpu(lambda: [parse_units(d.decode("utf-8", "replace"), count_batch) for d in datas])
    ts_rate, names_rate = _rate(len(files), ts_s), _rate(len(files), names_s)
    print(f"  references: tree-sitter parse {ts_rate:.1f} files/s; names resolver's file pass (parse_units) "
          f"{names_rate:.1f} files/s; names it finds ambiguous: {_names_ambiguous(fus)}", flush=True)

    flags, flags_s = _cpu(lambda: cx.FlagSource(root))
    _, infer_s = _cpu(lambda: flags.flags_for("a.cc"))
    print(f"  clang flags: {flags.origin} ({flags_s + infer_s:.2f} s once per tree)", flush=True)
    results, seconds = _clang_pass(root, files, flags)
    parse_s = sum(p for p, _ in seconds)
    _line("clang parse", _rate(len(files), parse_s), "files/s", ts_rate, "files/s (tree-sitter parse)")
    _rates("clang", results, seconds, names_rate, "files/s (names resolver's file pass)")
    _bindings(results)

    with_pch = cx.FlagSource(root, pch_dir=scratch / tree.name)
    _, pch_s = _cpu(lambda: with_pch.flags_for("a.cc"))
    print(f"  standard-library PCH: {'built' if '-include-pch' in with_pch.flags_for('a.cc') else 'NOT built'} "
          f"in {pch_s:.2f} s (once per tree)", flush=True)
    pch_results, pch_seconds = _clang_pass(root, files, with_pch)
    _line("clang parse, with the PCH", _rate(len(files), sum(p for p, _ in pch_seconds)), "files/s",
          _rate(len(files), parse_s), "files/s (without)")
    _rates("clang with the PCH", pch_results, pch_seconds, names_rate, "files/s (names resolver's file pass)")
    differ = [(a.path, a.fallback or f"{len(a.references)} references", b.fallback or f"{len(b.references)} references")
              for a, b in zip(results, pch_results, strict=True)
              if (a.definitions, a.references, a.fallback) != (b.definitions, b.references, b.fallback)]
    print(f"  files with identical definitions, references and fallback with and without the PCH: "
          f"{len(files) - len(differ)} of {len(files)}; differing (without, with): {differ[:3]}", flush=True)
    _chunker_pass(tree, files, scratch)
    _preamble_options(root, [rel for rel in files if not rel.endswith(cx.HEADER_EXTENSIONS)][:sample], flags)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="*", type=Path)
    parser.add_argument("--sample", type=int, default=20, help="files per tree for the preamble options")
    args = parser.parse_args()
    trees = args.trees or [Path(p) for p in os.environ.get("NANODATA_BENCH_TREES", "").split(":") if p] \
        or [Path(p) for p in DEFAULT_TREES if Path(p).is_dir()]
    if not trees:
        print("clang_resolver: skipped: name tree directories or set NANODATA_BENCH_TREES")
        return
    print(f"libclang {version('libclang')} ({ci.conf.get_filename()}); host include dirs: {len(cx.host_include_dirs())}; one process, CPU time; "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    count_batch = counter_for("cl100k_base").count_batch
    with tempfile.TemporaryDirectory() as scratch:
        for tree in trees:
            bench_tree(tree, args.sample, count_batch, Path(scratch))


if __name__ == "__main__":
    main()

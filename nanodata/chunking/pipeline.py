"""`chunk_to_jsonl`: sources -> parsed units -> docs -> JSONL, in parallel, deterministically.

Local modes (basic, dep-aware) parse and emit each file in one worker task. Global modes
parse every file first (pass 1), build the Index in the parent, then start a second pool whose
workers receive it once each and emit per file (pass 2). Pools return results in input order and the parent
alone dedupes and writes, so the output is byte-identical for any --workers.
"""

from __future__ import annotations

import logging
import time

from tqdm import tqdm

from nanodata.chunking.graphs import include_dependencies, topo_order
from nanodata.chunking.modes import GLOBAL_MODES, MODES, Chunker, Index
from nanodata.chunking.pack import counter_for
from nanodata.chunking.sources import CPP_EXTENSIONS, Listing, Problem, load_text, read_jsonl, walk_project_dirs
from nanodata.chunking.units import parse_units
from nanodata.chunking.writer import JsonlWriter
from nanodata.errors import NanodataError
from nanodata.workers import process_pool

log = logging.getLogger(__name__)
MIN_TOKENS = 16
TASKS_PER_CHUNK = 4
PROBLEMS_KEPT = 100

_state: dict = {}   # per process: the run's settings, its Counter and (pass 2) its Chunker


def _init_worker(settings: dict) -> None:
    """Set up a process (a pool worker, or the parent itself with one worker) for one pass."""
    _state.clear()
    _state.update(settings, counter=counter_for(settings["tokenizer"]))
    if "index" in settings:
        _state["chunker"] = Chunker(settings["mode"], settings["budget"], _state["counter"], settings["index"],
                                    settings["cross_depth"])


def _parse(src):
    text, problem = load_text(src)
    if problem is not None:
        return None, problem, 0
    fu = parse_units(text, _state["counter"].count_batch, with_references=_state["mode"] != "basic")
    return fu, None, len(text.encode("utf-8"))


def _parse_and_emit(src):
    """Local modes: one file in, its docs out."""
    fu, problem, size = _parse(src)
    if fu is None:
        return None, problem, 0, False
    chunker = Chunker(_state["mode"], _state["budget"], _state["counter"], Index([fu]), _state["cross_depth"])
    return chunker.docs(0, src.source), None, size, fu.syntax_errors


def _emit(item):
    f, source = item
    return _state["chunker"].docs(f, source)


def _map(function, items: list, settings: dict, workers: int, progress: tqdm | None):
    if workers <= 1:
        _init_worker(settings)
        results = map(function, items)
    else:
        pool = process_pool(workers, _init_worker, (settings,))
        results = pool.imap(function, items, chunksize=TASKS_PER_CHUNK)
    try:
        for result in results:
            if progress is not None:
                progress.update(1)
            yield result
    finally:
        if workers > 1:
            pool.terminate()
            pool.join()


def _project_ranks(files: list) -> list[int]:
    """Projects in #include order (dependencies first, cycles broken by name); rank of each file."""
    paths: dict[str, list[str]] = {}
    includes: dict[str, set[str]] = {}
    for src, fu, _ in files:
        paths.setdefault(src.project, []).append(src.path)
        includes.setdefault(src.project, set()).update(fu.includes)
    projects = sorted(paths)
    order = topo_order(projects, include_dependencies(paths, includes))
    rank = {p: i for i, p in enumerate(order)}
    return [rank[src.project] for src, _, _ in files]


def _local_results(files: list, settings: dict, workers: int, bar):
    """(docs, problem, bytes, has syntax errors) per file, in input order: one task per file."""
    yield from _map(_parse_and_emit, files, settings, workers, bar)


def _global_results(files: list, settings: dict, workers: int, bar):
    """Same, in two passes: parse everything, index it, then emit (files in project order)."""
    parsed = []
    parse_results = list(_map(_parse, files, settings, workers, bar))  # drained: pass 1's pool is gone
    for src, (fu, problem, size) in zip(files, parse_results):
        if problem is not None:
            yield None, problem, 0, False
        else:
            parsed.append((src, fu, size))
    ranks = _project_ranks(parsed) if settings["mode"] == "project" else [0] * len(parsed)
    order = sorted(range(len(parsed)), key=lambda i: (ranks[i], i))
    parsed = [parsed[i] for i in order]
    index = Index([fu for _, fu, _ in parsed], [ranks[i] for i in order])
    items = [(f, src.source) for f, (src, _, _) in enumerate(parsed)]
    for (_, fu, size), docs in zip(parsed, _map(_emit, items, {**settings, "index": index}, workers, bar)):
        yield docs, None, size, fu.syntax_errors


def chunk_to_jsonl(output, *, inputs=(), project_dirs=(), mode="basic", max_tokens=2048, tokenizer="cl100k_base",
                   cross_depth=3, max_file_bytes=500_000, workers=1, strict=False,
                   extensions=CPP_EXTENSIONS, append=False, progress=False) -> dict:
    """Chunk C++ from JSONL `inputs` and/or `project_dirs` into OUTPUT (JSONL) + OUTPUT.done; returns the summary."""
    if mode not in MODES:
        raise NanodataError(f"--mode {mode!r}: expected one of {', '.join(MODES)}")
    if max_tokens < MIN_TOKENS:
        raise NanodataError(f"--max-tokens {max_tokens}: must be at least {MIN_TOKENS}")
    if cross_depth < 0 or max_file_bytes <= 0 or workers < 1:
        raise NanodataError(f"--cross-depth >= 0, --max-file-bytes > 0, --workers >= 1 required "
                            f"(got {cross_depth}, {max_file_bytes}, {workers})")
    if not inputs and not project_dirs:
        raise NanodataError("nothing to chunk: give --inputs and/or --project-dirs")
    started = time.perf_counter()
    counter_for(str(tokenizer))  # a bad tokenizer fails here, before any work
    listing = Listing()
    for path in inputs:
        read_jsonl(path, max_file_bytes, listing)
    for root in project_dirs:
        walk_project_dirs(root, tuple(e.lower() for e in extensions), max_file_bytes, listing)
    problems: list[Problem] = list(listing.problems)
    if strict and problems:
        raise NanodataError(f"{problems[0]} (--strict)")

    settings = {"tokenizer": str(tokenizer), "mode": mode, "budget": max_tokens, "cross_depth": cross_depth}
    bar = tqdm(total=len(listing.files) * (2 if mode in GLOBAL_MODES else 1), unit="file",
               desc=f"chunk {mode}", disable=not progress)
    writer = JsonlWriter(output, mode, append)
    stats = {"files_read": 0, "bytes_read": 0, "syntax_errors": 0}

    def note(problem):
        problems.append(problem)
        if strict:
            raise NanodataError(f"{problem} (--strict)")

    try:
        steps = _global_results if mode in GLOBAL_MODES else _local_results
        for docs, problem, size, syntax_errors in steps(listing.files, settings, workers, bar):
            if problem is not None:
                note(problem)
                continue
            writer.write(docs)
            stats["files_read"] += 1
            stats["bytes_read"] += size
            stats["syntax_errors"] += syntax_errors
        if stats["files_read"] == 0:
            first = f": first problem: {problems[0]}" if problems else ""
            raise NanodataError(f"no usable C++ input ({len(problems)} problems){first}")
    except BaseException:
        writer.abort()
        raise
    finally:
        bar.close()
        _state.clear()

    seconds = time.perf_counter() - started
    summary = {
        "output": str(output), "mode": mode, "max_tokens": max_tokens, "tokenizer": str(tokenizer),
        **stats,
        "files_skipped": sum(p.status == "skipped" for p in problems),
        "files_failed": sum(p.status == "failed" for p in problems),
        "docs": writer.docs, "tokens": writer.tokens, "docs_split": writer.split,
        "duplicates_dropped": writer.duplicates, "seconds": round(seconds, 3),
        "files_per_s": round(stats["files_read"] / seconds, 1) if seconds else 0.0,
        "mb_per_s": round(stats["bytes_read"] / seconds / 1e6, 3) if seconds else 0.0,
        "problems": [str(p) for p in problems[:PROBLEMS_KEPT]],
    }
    writer.commit(summary)
    for problem in problems[:20]:
        log.warning("%s", problem)
    if len(problems) > 20:
        log.warning("... and %d more problems (see %s.done)", len(problems) - 20, output)
    return summary

"""The CLI's executor of the build graph (nanodata.pipeline.chunkbuild.graph): `chunk_to_jsonl` and
`chunk_to_parquet`, what `nanodata chunk` runs.

A run checks its inputs, output and settings before any work, then runs the graph's stages for its settings in this
process, in turn, a pool of workers inside each per-partition stage (InProcess: one method per stage). The inputs are
streamed and cut into partitions of about `partition_mb` MB as they come; the stage is a temp dir beside the output,
its files sealed with a key made for the run. When the graph is just chunk -> merge (a local mode without near-dedup)
nothing waits for a reduce, so the docs stream straight into the output in input order. The summary (OUTPUT.done)
is written with the output's commit.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from nanodata.errors import NanodataError
from nanodata.pipeline.chunkbuild import graph
from nanodata.pipeline.chunkbuild.clangpass import add_resolver
from nanodata.pipeline.chunkbuild.config import ChunkConfig
from nanodata.pipeline.chunkbuild.pipeline import Tally, chunk_items, emit_store, merge_docs, start_worker
from nanodata.pipeline.chunkbuild.reuse import totals
from nanodata.pipeline.chunkbuild.sources import SourceFile, jsonl_items, tree_items
from nanodata.pipeline.chunkbuild.stage import DOCS, STAGED, index_uri, item_uri, units_uri
from nanodata.pipeline.chunkbuild.writer import JsonlWriter, ParquetDocs, work_path
from nanodata.pipeline.chunking.fidelity import summarize
from nanodata.ranges import ROWS_PER_FILE, SEED, VAL_FRACTION, not_local
from nanodata.settings import GLOBAL_MODES
from nanodata.storage import parse_gs
from nanodata.storage.auth import Secret, sealed
from nanodata.storage.entries import EntryStore
from nanodata.storage.files import check_output_dir, disk_errors, disk_full_error, is_disk_full

log = logging.getLogger(__name__)


def check_inputs(inputs, project_dirs, extensions: tuple) -> None:
    if not inputs and not project_dirs:
        raise NanodataError("nothing to chunk: give --inputs and/or --project-dirs")
    if project_dirs and not any(e.strip(".") for e in extensions):
        raise NanodataError(f"--extensions {','.join(extensions)!r}: no file extension given for --project-dirs")
    for uri in inputs:
        if parse_gs(str(uri)) is None and Path(uri).is_dir():
            raise NanodataError(f"--inputs {uri}: is a directory; give JSONL files (a C++ tree goes to --project-dirs)")


def check_resolver(config: ChunkConfig, inputs, project_dirs) -> None:
    """--resolver clang parses files in their trees, with their includes: a run with no local tree is refused (every
    file would fall back to names); JSONL records beside trees are resolved by names, said once up front."""
    if config.resolver != "clang":
        return
    remote = [d for d in project_dirs if parse_gs(str(d)) is not None]
    if remote or not project_dirs:
        raise NanodataError(f"--resolver clang: parses project trees on local disk (--project-dirs), each file with "
                            f"its includes; {f'{remote[0]} is in a bucket' if remote else 'this run has none'} "
                            "(records of --inputs are resolved by names)")
    if inputs:
        log.warning("--resolver clang: the records of --inputs have no tree to parse in: they are resolved by names "
                    "(counted under 'clang' in the summary)")


def check_run(output: Path, inputs, project_dirs, extensions: tuple) -> None:
    """Where a run reads and writes, checked before any work (its settings are a checked ChunkConfig)."""
    check_inputs(inputs, project_dirs, extensions)
    if output.is_dir():
        raise NanodataError(f"--output {output}: is a directory; give the path of a .jsonl file to write")
    parent = next((p for p in output.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise NanodataError(f"--output {output}: {parent} is a file, not a directory")
    check_output_dir(output.parent, "--output")  # writable (a read-only place, /proc: one line, nothing made)
    for uri in inputs:
        if parse_gs(str(uri)) is None and Path(uri).exists() and Path(uri).resolve() == output.resolve():
            raise NanodataError(f"--output {output}: is also an input; write the docs to another file")


def input_items(inputs, project_dirs, extensions, max_file_bytes: int | None):
    """Every item of a run, streamed: JSONL inputs in the order given, then each project tree."""
    for number, uri in enumerate(inputs):
        yield from jsonl_items(str(uri), number, max_file_bytes)
    for number, root in enumerate(project_dirs, start=len(inputs)):
        yield from tree_items(str(root), number, extensions, max_file_bytes)


def _nothing_found(inputs, project_dirs, extensions) -> str:
    """Where a run found no file at all: what it looked in, and for what (one of the two is given)."""
    where = [f"no docs in {', '.join(map(str, inputs))}"] if inputs else []
    if project_dirs:
        where.append(f"no C++ files (extensions {','.join(extensions)}) under {', '.join(map(str, project_dirs))}")
    return "; ".join(where)


def cut_by_bytes(items, limit: int):
    """Consecutive partitions of an item stream, each closed once it holds `limit` bytes of files."""
    iterator = iter(items)
    ended = False

    def partition():
        nonlocal ended
        total = 0
        for item in iterator:
            yield item
            total += item.size if isinstance(item, SourceFile) else 0  # a Problem weighs nothing
            if total >= limit:
                return
        ended = True

    while not ended:
        yield partition()


def chunk_to_jsonl(output, *, inputs=(), project_dirs=(), config: ChunkConfig | None = None, strict=False,
                   append=False, progress=False, **settings) -> dict:
    """Chunk C++ from JSONL `inputs` (.jsonl, .jsonl.gz, .jsonl.zst; local or gs://) and/or `project_dirs`
    into OUTPUT (JSONL) + OUTPUT.done; returns the summary. Streams: memory does not grow with the input.
    The settings: a ChunkConfig, or its fields as keywords (mode=, max_tokens=, tokenizer=, ...)."""
    problem = not_local(output, "file")  # Path() would fold gs://b/x into a local folder 'gs:'
    if problem is not None:
        raise NanodataError(f"--output {problem}")
    config = config if config is not None else ChunkConfig(**settings)
    output = Path(output)
    check_run(output, inputs, project_dirs, config.extensions)
    check_resolver(config, inputs, project_dirs)
    return _chunk(lambda: JsonlWriter(output, config.mode, append), output, inputs, project_dirs, config, strict,
                  progress)


def chunk_to_parquet(out_dir, *, inputs=(), project_dirs=(), config: ChunkConfig | None = None, strict=False,
                     progress=False, rows_per_file: int = ROWS_PER_FILE.default,
                     val_fraction: float = VAL_FRACTION.default, seed: int = SEED.default, **settings) -> dict:
    """chunk_to_jsonl's docs written straight into parquet shards in `out_dir` (a new or empty local directory),
    as `nanodata to-parquet` would write chunk_to_jsonl's output with the same rows_per_file, val_fraction and
    seed: shards, val_shard.parquet, manifest.json, the summary (CHUNK_SUMMARY), _COMPLETE. Returns the summary."""
    config = config if config is not None else ChunkConfig(**settings)
    check_inputs(inputs, project_dirs, config.extensions)
    check_resolver(config, inputs, project_dirs)
    out_dir = check_parquet_dir(str(out_dir))
    shards = {"rows_per_file": ROWS_PER_FILE.check("--rows-per-file", rows_per_file),
              "val_fraction": VAL_FRACTION.check("--val-fraction", val_fraction), "seed": SEED.check("--seed", seed)}
    return _chunk(lambda: ParquetDocs(out_dir, config.mode, **shards), out_dir, inputs, project_dirs, config, strict,
                  progress)


def check_parquet_dir(out_dir: str) -> Path:
    """A new or empty local directory (a corpus is uploaded with `nanodata sync`)."""
    if out_dir.startswith("gs:"):
        raise NanodataError(f"--parquet-dir {out_dir}: a local directory is needed (copy it with `nanodata sync`)")
    check_output_dir(out_dir, "--parquet-dir")
    path = Path(out_dir)
    if path.is_dir() and any(path.iterdir()):
        raise NanodataError(f"--parquet-dir {out_dir}: is not empty; give a new or empty directory")
    return path


def _chunk(make_writer, output: Path, inputs, project_dirs, config: ChunkConfig, strict: bool, progress: bool) -> dict:
    """The run behind chunk_to_jsonl and chunk_to_parquet: every item chunked into make_writer()'s writer."""
    mode, max_tokens, workers, extensions = config.mode, config.max_tokens, config.workers, config.extensions
    settings = config.worker_settings()
    started = time.perf_counter()
    items = input_items(inputs, project_dirs, extensions, config.max_file_bytes)
    tally = Tally(strict=strict)
    with disk_errors(output):
        output.parent.mkdir(parents=True, exist_ok=True)
        writer = make_writer()
    bar = tqdm(unit="file", desc=f"chunk {mode}", disable=not progress)
    counts_of_run: dict = {}
    try:
        steps = graph.stages(mode, settings["near"])
        if [step.name for step in steps] == ["chunk", "merge"]:  # nothing waits for a reduce: one pass, streamed
            for step in steps:
                log.debug("stage %s, streamed", step.name)
            for result in chunk_items(items, settings, workers, tally, bar):
                writer.write(result.docs, result.source)
        else:
            work = work_path(output, "work")
            shutil.rmtree(work, ignore_errors=True)  # a killed run's partitions
            work.mkdir()
            try:
                counts_of_run = InProcess(items, settings, workers, tally, bar, work,
                                          int(config.partition_mb * 2 ** 20), writer).run()
            finally:
                shutil.rmtree(work, ignore_errors=True)
        if tally.files_read == tally.files_dropped:
            dropped = next((f"{d['listed'][0]['file']}: {reason} ({d['listed'][0]['figure']})"
                            for reason, d in tally.cleaning.dropped.items()), None)
            first = (f": first problem: {tally.problems[0]}" if tally.problems else
                     f": {tally.too_big[0]['file']} is over --max-file-bytes" if tally.too_big else
                     f": every file was dropped, first {dropped}" if dropped else "")
            seen = tally.files_skipped + tally.files_failed + tally.files_dropped
            if not seen:
                raise NanodataError(f"no C++ input: {_nothing_found(inputs, project_dirs, extensions)}")
            raise NanodataError(f"no usable C++ input ({seen} problem{'s' * (seen != 1)}){first}")
    except BaseException as exc:
        writer.abort()
        if is_disk_full(exc):  # the output, its staging or the dedupe table: all next to OUTPUT
            raise disk_full_error(f"{output} (or its work files in {output.parent})") from None
        raise
    finally:
        items.close()
        bar.close()
        start_worker(None)

    seconds = time.perf_counter() - started
    counts = tally.counts()
    summary = {
        "output": str(output), "mode": mode, "max_tokens": max_tokens, "tokenizer": config.tokenizer,
        "settings": config.decisive(),  # every setting that decides the output (nanodata.settings)
        **{k: counts[k] for k in ("files_read", "bytes_read", "syntax_errors", "files_skipped", "files_failed")},
        "docs": writer.docs, "tokens": writer.tokens, "docs_split": writer.split,
        "duplicates_dropped": writer.duplicates, "seconds": round(seconds, 3),
        "files_per_s": round(tally.files_read / seconds, 1) if seconds else 0.0,
        "mb_per_s": round(tally.bytes_read / seconds / 1e6, 3) if seconds else 0.0,
        "problems": counts["problems"], "max_file_bytes": config.max_file_bytes,
        "files_too_big": counts["files_too_big"], "too_big": counts["too_big"],
        # global modes: per project, names defined more than once with one qualification (never pulled)
        **{k: counts_of_run[k] for k in ("ambiguous_names", "ambiguous_by_project") if k in counts_of_run},
        # --resolver clang: per project, files resolved by clang or by names (why), references, pulls vs names
        **({"clang": counts["resolver"]} if config.resolver == "clang" and mode in GLOBAL_MODES else {}),
        "dedup": config.dedup, "near_duplicates": counts_of_run.get("near_duplicates"),
        # what cleaning dropped (per reason, each file named with its figure), redacted (counts by kind), licenses
        "filters": list(config.filters), "redact": list(config.redact), "decontaminate": list(config.decontaminate),
        "licenses": None if config.licenses is None else list(config.licenses),
        "files_dropped": counts["files_dropped"], "cleaning": counts["cleaning"],
        # lines kept, balanced docs, cuts by lines: overall and per project (before exact dedupe)
        "fidelity": summarize(counts["fidelity"]),
        # --cache: files whose results were reused or chunked, per project; the cache after this run's retention
        "reuse": None if config.cache is None else {**totals(counts["reuse"]), "by_project": counts["reuse"]},
    }
    if config.cache is not None:  # this run's entries recorded, older runs' unused ones swept, before the commit
        store = EntryStore(config.cache)
        store.record_use(f"{time.time_ns():020d}-{os.getpid()}", bytes(tally.reuse.used))  # names sort by age
        summary["reuse"]["cache"] = store.retain(config.cache_keep_runs, config.cache_grace_hours)
    with disk_errors(output):
        writer.commit(summary)
    for problem in counts["problems"][:20]:
        log.warning("%s", problem)
    n_problems = tally.files_skipped + tally.files_failed
    if n_problems > 20:
        log.warning("... and %d more problems (see %s.done)", n_problems - 20, output)
    return summary


class InProcess:
    """The graph's stages run here, in turn, in `stage` (a temp dir): one method per stage (graph.STAGES' names),
    each over every partition or once. Returns from run(): the index's counts and the near-dedup summary."""

    def __init__(self, items, settings: dict, workers: int, tally: Tally, bar, stage: Path, partition_bytes: int,
                 writer):
        self.items, self.workers, self.tally, self.bar, self.writer = items, workers, tally, bar, writer
        self.settings = {**settings, "scratch": str(stage)}  # the clang pass's standard-library PCH
        self.stage, self.root, self.partition_bytes = stage, str(stage), partition_bytes
        self.secret = Secret(os.urandom(32), "the run's own key")  # its staged files are sealed as a DAG build's are
        self.passed: list[tuple[int, dict]] = []     # (partition, its file pass's result)
        self.staged: list[tuple[int, str, list]] = []  # (partition, its staged docs, their groups): the merge's input
        self.counts: dict = {}
        self.groups = 0

    def run(self) -> dict:
        for step in graph.stages(self.settings["mode"], self.settings["near"]):
            log.debug("stage %s, over each %s", step.name, step.over)
            getattr(self, step.name)()
        return self.counts

    def _checked(self, uri: str) -> Path:
        """A staged file of this run (local: the file itself), under its seal: one changed since stops the run."""
        return sealed(uri, self.secret, required=True).local(uri)

    def _docs(self, number: int) -> Path:
        return Path(item_uri(self.root, DOCS, number, STAGED))

    def _file_pass(self) -> None:
        for number, partition in enumerate(cut_by_bytes(self.items, self.partition_bytes)):
            with tempfile.TemporaryDirectory(prefix="pass-", dir=self.stage) as tmp:
                passed = graph.file_pass(self.root, number, partition, self.settings, workers=self.workers,
                                         tally=self.tally, tmp=Path(tmp), secret=self.secret,
                                         docs=self._docs(number), bar=self.bar)
            self.passed.append((number, passed))
            if "groups" in passed:
                self.staged.append((number, str(self._docs(number)), passed["groups"]))

    parse = chunk = _file_pass

    def index(self) -> None:
        self.counts = graph.make_index(self.root, len(self.passed), self.settings["mode"], self.secret)

    def emit(self) -> None:
        emitted = Tally()
        index = self._checked(index_uri(self.root))
        for number, _ in self.passed:
            store = self._checked(units_uri(self.root, number))
            groups = emit_store(store, index, self.settings, self.workers, self._docs(number), emitted, self.bar)
            self.staged.append((number, str(self._docs(number)), groups))
            store.unlink()  # read once: the disk holds one partition's docs and units at a time, not both of all
        self.tally.fidelity = emitted.fidelity  # the emit pass makes the docs
        for project, figures in emitted.resolver.items():  # its pulls beside the parse pass's files
            add_resolver(self.tally.resolver, project, figures)
        self.tally.reuse = emitted.reuse.after_parse(self.tally.reuse)

    def _signed(self) -> list[tuple[int, dict]]:
        return [(number, passed["near"]) for number, passed in self.passed]

    def near(self) -> None:
        threshold, signed = self.settings["near"], self._signed()
        self.groups = graph.near_groups(sum(info["files"] for _, info in signed), threshold)
        for group in range(self.groups):
            graph.near_group(self.root, group, self.groups, threshold, signed, self.secret)

    def settle(self) -> None:
        self.counts["near_duplicates"] = graph.settle(self.root, self.groups, self.settings["near"], self._signed(),
                                                      self.secret)

    def merge(self) -> None:
        near = self.settings["near"] is not None
        removed = graph.removed_files(self.root, self.secret) if near else None
        docs_removed = merge_docs(self.staged, self.writer, removed)
        if near:
            self.counts["near_duplicates"]["docs_removed"] = docs_removed

"""The chunk build as one graph: its stages, what each reads and writes in the stage (the layout of
nanodata.pipeline.chunkbuild.stage), when it runs, and its work, written once. Two executors run it:

- `nanodata chunk` (nanodata.pipeline.chunkbuild.executor) runs every stage in this process, over partitions cut
  from the streamed inputs, a pool of workers inside each per-partition stage; its stage is a temp dir, sealed with
  a key made for the run and forgotten after it;
- the Airflow DAG (nanodata.jobs.cpp_corpus) maps each per-partition stage as tasks over the partitions its plan cut,
  and runs each reduce as one task; its stage lives beside the destination, sealed with the deployment's secret. A
  task that finds a staged file not as sealed has the stage that made it run again (the CLI's run stops instead:
  nothing but itself writes its temp dir).

    parse (per partition) ─→ units ─→ index (reduce) ─→ emit (per partition) ─┐   global modes
    chunk (per partition) ────────────────────────────────────────────────────┤   local modes
      └ both file passes, near-dedup on: signatures ─→ near (per band group)  ├─→ docs ─→ merge
                                                        ─→ settle (reduce) ───┘      (CLI: one JSONL/parquet in
                                                           removed files              input order; DAG: route →
                                                                                      bucket → shard)

Every doc depends only on its file and the index, the merge goes in input order (by project rank in project mode),
so both executors make the same corpus however the inputs are cut and whatever the worker count.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

from nanodata.pipeline.chunkbuild.globalindex import build_index
from nanodata.pipeline.chunkbuild.pipeline import Tally, chunk_items, parse_items, stage_docs
from nanodata.pipeline.chunkbuild.stage import index_uri, item_name, near_uri, units_uri
from nanodata.pipeline.dedup import near
from nanodata.pipeline.dedup.minhash import lsh_shape
from nanodata.settings import GLOBAL_MODES
from nanodata.storage import is_gcs
from nanodata.storage.auth import Secret, seal_file, sealed

ALWAYS, GLOBAL, LOCAL, NEAR = "always", "global modes", "local modes", "near-dedup"


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One stage of the graph. `over`: what one piece of its work is (a partition, a band group; "build" for a
    reduce, run once); `reads`/`writes`: the files of the stage it reads and writes (stage.py's layout, "{n}" a
    piece's number: item_name); `done`: its skip rule, the record that, there under its seal, means the piece is
    done (written last: a stage kept between runs, the DAG's, redoes nothing finished; the CLI's temp stage starts
    empty); `when`: the builds that have it; `tasks`: the DAG tasks that run it."""
    name: str
    over: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    done: str
    when: str
    tasks: tuple[str, ...]

    def runs(self, mode: str, near_threshold: float | None) -> bool:
        return {ALWAYS: True, GLOBAL: mode in GLOBAL_MODES, LOCAL: mode not in GLOBAL_MODES,
                NEAR: near_threshold is not None}[self.when]


SIGNATURES = ("near/sigs/{n}.bin", "near/names/{n}.txt", "near/bands/{n}.bin")  # with near-dedup
STAGES = (
    Stage(name="parse", over="partition", reads=("partitions/{n}.json",), writes=("units/{n}.sqlite", *SIGNATURES),
          done="units/{n}.json", when=GLOBAL, tasks=("parse",)),
    Stage(name="index", over="build", reads=("units/{n}.sqlite",), writes=("index/index.sqlite",),
          done="index/summary.json", when=GLOBAL, tasks=("index",)),
    Stage(name="emit", over="partition", reads=("units/{n}.sqlite", "index/index.sqlite"), writes=("scatter/{n}.bin",),
          done="docs/{n}.json", when=GLOBAL, tasks=("chunk",)),
    Stage(name="chunk", over="partition", reads=("partitions/{n}.json",), writes=("scatter/{n}.bin", *SIGNATURES),
          done="docs/{n}.json", when=LOCAL, tasks=("chunk",)),
    Stage(name="near", over="band group", reads=SIGNATURES, writes=("near/edges/{n}.bin", "near/members/{n}.bin"),
          done="near/edges/{n}.json", when=NEAR, tasks=("near",)),
    Stage(name="settle", over="build", reads=("near/edges/{n}.bin", "near/members/{n}.bin"),
          writes=("near/removed.bin",), done="near/summary.json", when=NEAR, tasks=("route",)),
    # the CLI merges the partitions' docs into OUTPUT; the DAG scatters them by bucket, then routes and shards them
    Stage(name="merge", over="build", reads=("scatter/{n}.bin", "near/removed.bin"),
          writes=("routed/{n}.bin", "shards/{n}.json"), done="builds/<key>/_COMPLETE", when=ALWAYS,
          tasks=("route", "bucket", "shard")),
)


def stages(mode: str, near_threshold: float | None) -> list[Stage]:
    """The stages a build with these settings runs, in the order they run."""
    return [stage for stage in STAGES if stage.runs(mode, near_threshold)]


# ---------------------------------------------------------------- per partition: the file pass (parse, or chunk)

@contextlib.contextmanager
def signing(settings: dict, stage: str, partition: int, tmp: Path, summary: dict, secret: Secret):
    """The near-dedup sink of a partition's file pass (None when the build does not near-dedupe): its files go to
    near/ and its counts into the partition's summary (`near`) once the pass is done."""
    if settings["near"] is None:
        yield None
        return
    sink = near.SignatureSink(tmp / "near", settings["near"])
    yield sink
    summary["near"] = sink.close(partition)
    near.store_signatures(sink.directory, near_uri(stage), partition, secret)


def file_pass(stage: str, number: int, items, settings: dict, *, workers: int, tally: Tally, tmp: Path,
              secret: Secret, docs: Path | None = None, bar=None) -> dict:
    """Stage parse or chunk, one partition: every file read once (cleaned, license-checked, its signature taken when
    near-deduping). Global modes: its units sealed at units/NNNNN.sqlite. Local modes: its docs as staged lines in
    the local file `docs` (given in these modes), their groups (see emit_store) under "groups". Returns, besides,
    {"near": counts} when near-deduping."""
    passed: dict = {}
    with signing(settings, stage, number, tmp, passed, secret) as sink:
        if settings["mode"] in GLOBAL_MODES:
            store = tmp / "units.sqlite"
            parse_items(items, settings, workers, store, tally, bar, sink)
            seal_file(store, units_uri(stage, number), secret)
        else:
            passed["groups"] = stage_docs(chunk_items(items, settings, workers, tally, bar, sink), docs)
    return passed


# ---------------------------------------------------------------- reduce: the index

def make_index(stage: str, partitions: int, mode: str, secret: Secret, fetch=None) -> dict:
    """Stage index: every partition's unit store -> index/index.sqlite, sealed; returns its counts. fetch(number,
    tmp) -> a local path of the store, its seal checked (default: the stage's own file, which must hold its seal);
    a copy downloaded into tmp is deleted once read."""
    def own(number: int, tmp: Path) -> Path:
        return sealed(units_uri(stage, number), secret, required=True).local(tmp / f"{item_name(number)}.sqlite")

    fetch = fetch or own
    with tempfile.TemporaryDirectory(prefix="nanodata-index-") as tmp:
        tmp = Path(tmp)

        def release(number: int) -> None:
            if is_gcs(stage):
                (tmp / f"{item_name(number)}.sqlite").unlink(missing_ok=True)

        local = tmp / "index.sqlite"
        counts = build_index(range(partitions), local, mode, tmp, lambda number: fetch(number, tmp), release)
        seal_file(local, index_uri(stage), secret)
    return counts


# ---------------------------------------------------------------- near-dedup: per band group, then settle

def near_groups(files: int, threshold: float) -> int:
    """How many band groups (near's pieces of work) for about `files` signed files."""
    return near.group_count(files, lsh_shape(threshold)[0])


def near_group(stage: str, group: int, groups: int, threshold: float, signed: list[tuple[int, dict]],
               secret: Secret) -> dict:
    """Stage near, one band group: its candidate pairs verified into near/edges/. signed: (partition, the file
    pass's `near` counts) of every partition."""
    partitions, _, _ = near.signed_partitions(signed)
    bands = near.group_bands(lsh_shape(threshold)[0], groups, group)
    return near.find_edges(near_uri(stage), group, bands, partitions, threshold, secret)


def settle(stage: str, groups: int, threshold: float, signed: list[tuple[int, dict]], secret: Secret) -> dict:
    """Stage settle: every group's pairs -> clusters, near/removed.bin (the files whose docs the merge leaves out)
    and near/summary.json, written last; returns the summary."""
    _, by_project, _ = near.signed_partitions(signed)
    return near.settle(near_uri(stage), groups, by_project, threshold, secret)


def removed_files(stage: str, secret: Secret):
    """The sorted gids of the files settle removed, under its seal."""
    return near.load_removed(near_uri(stage), secret)

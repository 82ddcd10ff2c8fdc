"""What one build task stages for another is used only under its seal: a keyed MAC over where it was put and its
bytes (nanodata.storage.auth). For every kind of staged file, an edited copy, a copy moved from another partition or
build, and one sealed with another secret change nothing: the task that finds it makes it again (the corpus is the
one an untouched build makes), or, where that task cannot, it stops in one line naming the file and what to delete,
and the build run again after that deletion makes the untouched build's corpus. Nothing read back runs code. The
steps run as the DAG calls them (tests/dags/dag_data), each step that wrote the tampered file run twice, as a retry
or a cleared task runs it."""

import gzip
import json
import pickle
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
import zstandard
from dag_data import _function, write_cpp_source

from nanodata import storage
from nanodata.errors import NanodataError
from nanodata.jobs import cpp_corpus
from nanodata.pipeline.chunkbuild.stage import INDEX, UNITS, item_uri, summary_uri
from nanodata.report import build_stats
from nanodata.storage.auth import MAC_SUFFIX, SEAL_MAGIC, load_secret, read_sealed_json, seal_file

STD = Path("/usr/include/c++/12/bits")
PARAMS = {"mode": "compilable", "max_tokens": 256, "tokenizer": "cl100k_base", "rows_per_file": 40,
          "val_fraction": 0.1}
CHUNK = {k: PARAMS.get(k) for k in ("mode", "max_tokens", "tokenizer", "max_file_bytes")}
STEPS = ("plan", "parse", "index", "chunk", "near", "route", "bucket", "shard_refs", "shard", "publish", "report",
         "cleanup")
OTHER = load_secret("an attacker's own secret, long enough")


class Touch:
    """Unpickling it creates a file."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return Path.touch, (self.path,)


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    """Trees, a JSONL file, a .gz input (a staged seek index) and a one-frame .zst input (staged decompressed
    files), in 8 partitions."""
    root = write_cpp_source(tmp_path_factory.mktemp("src"))
    for name in ("stl_pair.h", "stl_heap.h"):
        shutil.copy(STD / name, root / "projA" / name)
    gz = [{"text": _function(i) * 3, "path": f"f{i}.cpp", "repo": "gz"} for i in range(40)]
    (root / "more.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in gz).encode()))
    zst = [{"text": _function(i + 100) * 3, "path": f"z{i}.cpp", "repo": "zst"} for i in range(60)]
    (root / "most.jsonl.zst").write_bytes(
        zstandard.ZstdCompressor().compress("".join(json.dumps(r) + "\n" for r in zst).encode()))
    return root


@pytest.fixture(scope="module")
def fresh(src, tmp_path_factory) -> tuple[dict, Path]:
    """The corpus of an untouched build, and its stage (left in place: another build's files to move)."""
    dest = tmp_path_factory.mktemp("fresh")
    corpus, state = _build(src, dest, last="publish")
    return corpus, Path(state["planned"]["stage"])


def _build(src, dest: Path, tamper=None, last: str = "cleanup", secrets: dict | None = None):
    """Every step as the DAG runs them, up to `last`. tamper = (step, edit): after `step`, edit(stage) (what an
    attacker with bucket access could do between tasks), then `step` again. secrets: a step's cache secret (else
    the suite's). Returns the corpus and what the steps returned."""
    state: dict = {}
    secrets = secrets or {}

    def run(step):
        secret = secrets.get(step)
        if step == "plan":
            state["planned"] = cpp_corpus.plan(str(src), str(dest), PARAMS, partition_mb=0.01, cache_secret=secret)
            return
        planned = state["planned"]
        stage, key = planned["stage"], planned["key"]
        if step == "parse":
            state["parsed"] = [cpp_corpus.parse_batch(ref, cache_secret=secret, **CHUNK) for ref in planned["parse"]]
        elif step == "index":
            state["refs"] = cpp_corpus.index(planned, cache_secret=secret, **CHUNK)
        elif step == "chunk":
            state["chunks"] = [cpp_corpus.chunk_batch(ref, cache_secret=secret, **CHUNK) for ref in state["refs"]]
        elif step == "near":
            for ref in planned["near"]:
                cpp_corpus.near_batch(ref, cache_secret=secret)
        elif step == "route":
            state["buckets"] = cpp_corpus.route(stage, key, rows_per_file=PARAMS["rows_per_file"], shard_mb=64,
                                                val_fraction=PARAMS["val_fraction"], cache_secret=secret)
        elif step == "bucket":
            for ref in state["buckets"]:
                cpp_corpus.bucket_batch(ref, cache_secret=secret)
        elif step == "shard_refs":
            state["shards"] = cpp_corpus.shard_refs(stage, key, cache_secret=secret)
        elif step == "shard":
            for ref in state["shards"]:
                cpp_corpus.shard_batch(str(dest), ref, tokenizer=PARAMS["tokenizer"], cache_secret=secret)
        elif step == "publish":
            cpp_corpus.publish(str(dest), stage, key, cache_secret=secret)
        elif step == "report":
            state["report"] = build_stats.report_extras(stage, cache_secret=secret)
        else:
            cpp_corpus.cleanup(str(dest), key, cache_secret=secret)

    for step in STEPS[:STEPS.index(last) + 1]:
        run(step)
        if tamper and tamper[0] == step:
            tamper[1](state["planned"]["stage"])
            run(step)
    build = f"{dest}/builds/{state['planned']['key']}"
    corpus = {n: storage.read_bytes(f"{build}/{n}") for n in storage.list_names(build) if not n.startswith("report/")}
    return corpus, state


# ---------------------------------------------------------------- every kind of staged file, three ways


def _edit(path: Path) -> None:
    """An attacker's change: JSON gains a field, the removed list loses its last file, docs get injected text,
    anything else a byte flipped every 512 (so every piece a reader may check alone changes)."""
    data = path.read_bytes()
    if path.suffix == ".json":
        path.write_text(json.dumps({**json.loads(data), "forged": True}))
    elif path.name == "removed.bin":
        path.write_bytes(data[:-8])
    elif b"return" in data and path.parent.name in ("scatter", "routed"):
        path.write_bytes(data.replace(b"return", b"system", 1))
    else:
        flipped = bytearray(data)
        for at in range(0, len(flipped), 512):
            flipped[at] ^= 0x20
        path.write_bytes(bytes(flipped))


def _moved(name: str, sibling: str | None, other_stage: Path):
    """Another partition's file (`sibling`), else the same file of another build, copied with its seal."""
    def tamper(stage):
        source = Path(stage, sibling) if sibling else other_stage / name
        for suffix in ("", MAC_SUFFIX):
            shutil.copy(f"{source}{suffix}", f"{stage}/{name}{suffix}")

    return tamper


def _edited(name: str, _sibling, _other):
    return lambda stage: _edit(Path(stage, name))


def _resealed(name: str, _sibling, _other):
    """Edited, and sealed again with the attacker's own secret."""
    def tamper(stage):
        path = Path(stage, name)
        _edit(path)
        seal_file(path, str(path), OTHER)

    return tamper


# (staged file, the step that writes it, another partition's file of its kind, what a tampered one does:
# "remade" = the corpus is the untouched one; "stops" = a later step stops in one line naming it)
KINDS = [
    ("plan.json", "plan", None, "remade"),
    ("partitions/00000.json", "plan", "partitions/00001.json", "stops"),
    ("gzindex/00001.gzidx", "plan", None, "stops"),
    ("parts/00002-00003.jsonl", "plan", "parts/00002-00004.jsonl", "stops"),
    ("timings/plan.json", "plan", None, "stops"),
    ("units/00000.json", "parse", "units/00001.json", "remade"),
    ("units/00000.sqlite", "parse", "units/00001.sqlite", "remade"),
    ("reuse/units-00000.keys", "parse", "reuse/units-00001.keys", "remade"),
    ("near/sigs/00000.bin", "parse", "near/sigs/00001.bin", "stops"),
    ("near/bands/00000.bin", "parse", "near/bands/00001.bin", "stops"),
    ("near/names/00000.txt", "parse", "near/names/00001.txt", "stops"),
    ("index/index.sqlite", "index", None, "remade"),
    ("index/summary.json", "index", None, "remade"),
    ("docs/00000.json", "chunk", "docs/00001.json", "remade"),
    ("scatter/00000.bin", "chunk", "scatter/00001.bin", "stops"),
    ("reuse/docs-00000.keys", "chunk", "reuse/docs-00001.keys", "remade"),
    ("near/edges/00000.json", "near", None, "remade"),
    ("near/edges/00000.bin", "near", None, "stops"),
    ("near/members/00000.bin", "near", None, "stops"),
    ("near/summary.json", "route", None, "remade"),
    ("near/removed.bin", "route", None, "stops"),
    ("tail.json", "route", None, "remade"),
    ("routed/00000.json", "bucket", None, "remade"),
    ("routed/00000.bin", "bucket", None, "stops"),
    ("shard_plan.json", "shard_refs", None, "remade"),
    ("shards/00000.json", "shard", "shards/00001.json", "remade"),
]


@pytest.mark.parametrize("how", [_edited, _moved, _resealed], ids=["edited", "moved", "other-secret"])
@pytest.mark.parametrize("name, step, sibling, outcome", KINDS, ids=[k[0] for k in KINDS])
def test_a_tampered_staged_file_never_changes_the_corpus(src, fresh, tmp_path, name, step, sibling, outcome, how):
    corpus, other_stage = fresh
    assert (other_stage / name).is_file() and (other_stage / f"{name}{MAC_SUFFIX}").is_file()
    dest = tmp_path / "dest"
    if outcome == "remade":
        assert _build(src, dest, tamper=(step, how(name, sibling, other_stage)))[0] == corpus
        return
    with pytest.raises(NanodataError) as stopped:
        _build(src, dest, tamper=(step, how(name, sibling, other_stage)))
    message = str(stopped.value)
    assert f"/{name}: " in message and "\n" not in message, message
    remedy = re.search(r"; delete (\S+) and run the build again", message)
    assert remedy, message
    storage.delete_files([remedy.group(1)])
    assert _build(src, dest)[0] == corpus  # done as the line says, the build makes the untouched corpus


# ---------------------------------------------------------------- unit stores: nothing in them runs code


def _store(stage: str, number: int = 0) -> str:
    return item_uri(stage, UNITS, number, ".sqlite")


def test_a_forged_pickle_in_a_staged_unit_store_runs_nothing_and_the_corpus_is_unchanged(src, fresh, tmp_path):
    marker = tmp_path / "marker"
    evil = pickle.dumps(Touch(marker))

    def forge(stage):
        with sqlite3.connect(_store(stage)) as db:
            db.execute("UPDATE files SET units = ?", (evil,))
            db.execute("UPDATE defs SET unit = ?", (evil,))

    corpus, state = _build(src, tmp_path / "dest", tamper=("parse", forge), last="publish")
    assert not marker.exists()
    assert corpus == fresh[0]
    assert storage.read_json(summary_uri(state["planned"]["stage"], INDEX))["staged_rebuilt"] == [f"{UNITS}/00000"]


def test_a_staged_unit_store_edited_with_its_seal_recomputed_is_a_miss(src, fresh, tmp_path):
    guess = load_secret("an attacker's guess at the secret")

    def edit(stage):
        path = _store(stage)
        with sqlite3.connect(path) as db:
            db.execute("UPDATE defs SET text = 'int evil() { return 666; }\n'")
        mac = guess.mac(b"nanodata-staged", path.encode(), Path(path).read_bytes())  # (not how seals are laid out)
        Path(path + MAC_SUFFIX).write_bytes(SEAL_MAGIC + mac)

    corpus, _ = _build(src, tmp_path / "dest", tamper=("parse", edit), last="publish")
    assert corpus == fresh[0] and not any(b"evil" in data for data in corpus.values())


def test_an_edited_staged_index_is_made_again_by_the_chunk_task_that_finds_it(src, fresh, tmp_path):
    def edit(stage):
        with sqlite3.connect(f"{stage}/{INDEX}/index.sqlite") as db:
            db.execute("UPDATE units SET text = 'int evil() { return 666; }\n'")

    corpus, state = _build(src, tmp_path / "dest", tamper=("index", edit), last="publish")
    assert corpus == fresh[0] and not any(b"evil" in data for data in corpus.values())
    summaries = cpp_corpus.partition_summaries(state["planned"]["stage"])[1]
    assert summaries[0]["staged_rebuilt"] == [f"{INDEX}/index.sqlite"]  # the first chunk task rebuilt it
    assert all(s["staged_rebuilt"] == [] for s in summaries[1:])


# ---------------------------------------------------------------- the secret


def test_a_secret_changed_between_tasks_stops_the_next_one_in_one_line_and_a_fresh_plan_makes_the_corpus(
        src, fresh, tmp_path):
    """Tasks with another secret than plan's find every staged file unsealed: the first stops, naming plan.json;
    planned again with the new secret, the build makes every partition again and the untouched corpus."""
    dest = tmp_path / "dest"
    new = "the later tasks' secret, long"
    with pytest.raises(NanodataError, match=r"/plan\.json: its seal does not hold .*do all workers share the cache "
                                            r"secret\?\); delete (\S+/plan\.json) and run the build again") as stopped:
        _build(src, dest, secrets={step: new for step in STEPS if step != "plan"})
    storage.delete_files([re.search(r"delete (\S+) and", str(stopped.value)).group(1)])
    corpus, state = _build(src, dest, secrets=dict.fromkeys(STEPS, new), last="publish")
    assert corpus == fresh[0]
    stage = state["planned"]["stage"]  # each partition parsed again: its summary is sealed with the new secret
    assert all(read_sealed_json(item_uri(stage, UNITS, n), load_secret(new)) for n in range(8))

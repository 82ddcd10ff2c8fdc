"""What one build task stages for another (the global modes' unit stores and index) is used only under its seal: a
keyed MAC over where it was put and its bytes (nanodata.storage.auth). A forged, moved or edited store, or one sealed
with another secret, is made again by the task that finds it, and the corpus is the one an untouched build makes;
nothing in it runs code. The steps run as the DAG calls them (tests/dags/dag_data)."""

import pickle
import shutil
import sqlite3
from pathlib import Path

import pytest
from dag_data import run_tail, write_cpp_source

from nanodata import storage
from nanodata.jobs import cpp_corpus
from nanodata.jobs.stage import INDEX, UNITS, item_uri, summary_uri
from nanodata.storage.auth import MAC_SUFFIX, SEAL_MAGIC, load_secret

STD = Path("/usr/include/c++/12/bits")
PARAMS = {"mode": "compilable", "max_tokens": 256, "tokenizer": "cl100k_base", "rows_per_file": 40,
          "val_fraction": 0.1}
CHUNK = {k: PARAMS.get(k) for k in ("mode", "max_tokens", "tokenizer", "max_file_bytes")}


class Touch:
    """Unpickling it creates a file."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return Path.touch, (self.path,)


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    root = write_cpp_source(tmp_path_factory.mktemp("src"))
    for name in ("stl_pair.h", "stl_heap.h"):
        shutil.copy(STD / name, root / "projA" / name)
    return root


@pytest.fixture(scope="module")
def fresh(src, tmp_path_factory) -> dict:
    """The corpus of an untouched build."""
    return _build(src, tmp_path_factory.mktemp("fresh"))[1]


def _build(src, dest: Path, after_parse=None, after_index=None, secrets=(None, None)):
    """Every step as the DAG runs them, with a hook after parse and after index (what an attacker with bucket
    access could do between tasks); the parse tasks use secrets[0], the later ones secrets[1]. Returns the plan,
    the corpus and the index's summary."""
    planned = cpp_corpus.plan(str(src), str(dest), PARAMS, partition_mb=0.01)
    stage = planned["stage"]
    assert len(planned["parse"]) >= 1 and storage.read_json(f"{stage}/plan.json")["partitions"] >= 3
    for ref in planned["parse"]:
        cpp_corpus.parse_batch(ref, cache_secret=secrets[0], **CHUNK)
    if after_parse:
        after_parse(stage)
    refs = cpp_corpus.index(planned, cache_secret=secrets[1], **CHUNK)
    if after_index:
        after_index(stage)
    chunks = [cpp_corpus.chunk_batch(ref, cache_secret=secrets[1], **CHUNK) for ref in refs]
    run_tail(str(dest), planned, PARAMS)
    cpp_corpus.publish(str(dest), stage, planned["key"])
    build = f"{dest}/builds/{planned['key']}"
    corpus = {n: storage.read_bytes(f"{build}/{n}") for n in storage.list_names(build) if not n.startswith("report/")}
    return planned, corpus, storage.read_json(summary_uri(stage, INDEX)), chunks


def _store(stage: str, number: int = 0) -> str:
    return item_uri(stage, UNITS, number, ".sqlite")


def test_a_forged_pickle_in_a_staged_unit_store_runs_nothing_and_the_corpus_is_unchanged(src, fresh, tmp_path):
    marker = tmp_path / "marker"
    evil = pickle.dumps(Touch(marker))

    def forge(stage):
        with sqlite3.connect(_store(stage)) as db:
            db.execute("UPDATE files SET units = ?", (evil,))
            db.execute("UPDATE defs SET unit = ?", (evil,))

    _, corpus, summary, _ = _build(src, tmp_path / "dest", after_parse=forge)
    assert not marker.exists()
    assert corpus == fresh and summary["staged_rebuilt"] == [f"{UNITS}/00000"]


def test_a_staged_unit_store_copied_to_another_partition_is_a_miss(src, fresh, tmp_path):
    def move(stage):
        for suffix in ("", MAC_SUFFIX):  # the store and its seal
            shutil.copy(_store(stage, 1) + suffix, _store(stage, 0) + suffix)

    _, corpus, summary, _ = _build(src, tmp_path / "dest", after_parse=move)
    assert corpus == fresh and summary["staged_rebuilt"] == [f"{UNITS}/00000"]


def test_a_staged_unit_store_edited_with_its_seal_recomputed_is_a_miss(src, fresh, tmp_path):
    guess = load_secret("an attacker's guess at the secret")

    def edit(stage):
        path = _store(stage)
        with sqlite3.connect(path) as db:
            db.execute("UPDATE defs SET text = 'int evil() { return 666; }\n'")
        mac = guess.mac(b"nanodata-staged", path.encode(), Path(path).read_bytes())  # (not how seals are laid out)
        Path(path + MAC_SUFFIX).write_bytes(SEAL_MAGIC + mac)

    _, corpus, summary, _ = _build(src, tmp_path / "dest", after_parse=edit)
    assert corpus == fresh and summary["staged_rebuilt"] == [f"{UNITS}/00000"]
    assert not any(b"evil" in data for data in corpus.values())


def test_an_edited_staged_index_is_made_again_by_the_chunk_task_that_finds_it(src, fresh, tmp_path):
    def edit(stage):
        with sqlite3.connect(f"{stage}/{INDEX}/index.sqlite") as db:
            db.execute("UPDATE units SET text = 'int evil() { return 666; }\n'")

    _, corpus, _, chunks = _build(src, tmp_path / "dest", after_index=edit)
    assert corpus == fresh and not any(b"evil" in data for data in corpus.values())
    summaries = cpp_corpus.partition_summaries(chunks[0]["stage"])[1]
    assert summaries[0]["staged_rebuilt"] == [f"{INDEX}/index.sqlite"]  # the first chunk task rebuilt it
    assert all(s["staged_rebuilt"] == [] for s in summaries[1:])


def test_a_changed_secret_between_tasks_makes_the_staged_stores_again_and_the_corpus_is_unchanged(src, fresh,
                                                                                                   tmp_path):
    planned, corpus, summary, _ = _build(src, tmp_path / "dest", secrets=("the parse tasks' secret, long",
                                                                          "the later tasks' secret, long"))
    partitions = storage.read_json(f"{planned['stage']}/plan.json")["partitions"]
    assert corpus == fresh and summary["staged_rebuilt"] == [f"{UNITS}/{n:05d}" for n in range(partitions)]

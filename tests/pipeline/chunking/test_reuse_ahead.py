"""Reuse with the cache in a bucket: a partition's entries are fetched ahead (reuse.FileCache.ahead) and its output is
byte-identical to an uncached run's, whatever the window, with entries missing, corrupt or forged among them; a
reused doc is its stored output line, the source spliced in, the bytes json.dumps gives for the whole doc."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nanodata.pipeline.chunkbuild import chunk_to_jsonl
from nanodata.pipeline.chunkbuild.config import ChunkConfig
from nanodata.pipeline.chunkbuild.pipeline import Tally, chunk_items, stage_docs
from nanodata.pipeline.chunkbuild.reuse import totals
from nanodata.pipeline.chunkbuild.sources import hashed_tree_files, tree_item
from nanodata.pipeline.chunkbuild.writer import doc_line_of, from_staged, output_line, staged_line
from nanodata.pipeline.chunking.pack import Doc
from nanodata.pipeline.dedup.exact import digest_of
from nanodata.settings import CPP_EXTENSIONS
from nanodata.storage.entries import EntryStore
from nanodata.storage.uri import iter_sizes, join_uri, read_bytes, write_bytes

STD = Path("/usr/include/c++/12/bits")
NAMES = ("stl_pair.h", "stl_heap.h", "stl_stack.h", "stl_queue.h", "char_traits.h", "stl_tempbuf.h", "stl_bvector.h")


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "tree"
    for k, name in enumerate(NAMES):
        (root / f"p{k % 3}").mkdir(parents=True, exist_ok=True)
        shutil.copy(STD / name, root / f"p{k % 3}" / name)
    return root


def _planned(tree: Path) -> list:
    """The partition as the DAG plans it: each file with its content digest, so its entry's key is known unread."""
    return [tree_item(str(tree), rel, size, gid, None, digest)
            for gid, (rel, size, digest) in enumerate(hashed_tree_files(str(tree), CPP_EXTENSIONS))]


def _chunk_pass(items: list, out: Path, cache: str | None, workers: int = 1, window: int | None = None) -> dict:
    """A chunk task's work on the partition (its docs staged, as the DAG scatters them); its reuse counts."""
    settings = ChunkConfig(mode="basic", max_tokens=512, cache=cache).worker_settings()
    if window is not None:
        settings["cache"] = replace(settings["cache"], window=window)
    tally = Tally()
    stage_docs(chunk_items(items, settings, workers, tally), out)
    return totals(tally.reuse.to_dict())


def _entry_uris(cache: str) -> list[str]:
    root = join_uri(cache, "v3", "entries")
    return [join_uri(root, name) for name, _ in iter_sizes(root)]


def test_a_partition_reused_from_a_bucket_is_byte_identical_whatever_the_window(tmp_path, tree, gcs_bucket,
                                                                                   monkeypatch):
    items = _planned(tree)
    _chunk_pass(items, tmp_path / "ref.staged", None)
    cache = f"gs://{gcs_bucket}/cache"
    assert _chunk_pass(items, tmp_path / "first.staged", cache, workers=2)["files_chunked"] == len(NAMES)
    fetched = []
    get_many = EntryStore.get_many

    def counted(self, keys, window):
        for entry in get_many(self, keys, window):
            fetched.append(entry)
            yield entry

    monkeypatch.setattr(EntryStore, "get_many", counted)
    for workers, window in ((1, None), (2, None), (1, 2), (1, 0)):
        fetched.clear()
        counts = _chunk_pass(items, tmp_path / "again.staged", cache, workers, window)
        assert counts["files_reused"] == len(NAMES) and counts["files_chunked"] == 0
        assert (tmp_path / "again.staged").read_bytes() == (tmp_path / "ref.staged").read_bytes()
        assert [status for _, status in fetched] == ([] if window == 0 else ["hit"] * len(NAMES))
    first, second, third = _entry_uris(cache)[:3]
    write_bytes(first, read_bytes(first)[:-5])  # truncated
    write_bytes(second, read_bytes(third))  # another file's entry
    write_bytes(third, b"not an entry")
    fetched.clear()
    counts = _chunk_pass(items, tmp_path / "rebuilt.staged", cache)
    assert (tmp_path / "rebuilt.staged").read_bytes() == (tmp_path / "ref.staged").read_bytes()
    assert counts["entries_rebuilt"] == 3 and counts["files_reused"] == len(NAMES) - 3
    assert sorted(status for _, status in fetched) == ["corrupt", "corrupt", "forged"] + ["hit"] * (len(NAMES) - 3)


def test_records_reused_from_a_bucket_give_the_uncached_output(tmp_path, gcs_bucket):
    jsonl = tmp_path / "records.jsonl"
    jsonl.write_text("".join(json.dumps({"text": (STD / n).read_text(), "repo": f"r{k % 2}"}) + "\n"
                             for k, n in enumerate(NAMES)))
    settings = {"max_tokens": 512, "filters": "none", "redact": "none", "dedup": "exact"}
    chunk_to_jsonl(tmp_path / "ref.jsonl", inputs=[jsonl], **settings)
    cache = f"gs://{gcs_bucket}/cache"
    for out, workers in (("one", 1), ("two", 2), ("three", 1)):
        summary = chunk_to_jsonl(tmp_path / f"{out}.jsonl", inputs=[jsonl], cache=cache, workers=workers, **settings)
        assert (tmp_path / f"{out}.jsonl").read_bytes() == (tmp_path / "ref.jsonl").read_bytes()
    assert summary["reuse"]["files_reused"] == len(NAMES)


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)


@given(text=TEXT, source=TEXT, tokens=st.integers(0, 10**6), kind=st.sampled_from(["file", "split", "unit"]),
       lines=st.none() | st.tuples(st.integers(1, 10**6), st.integers(1, 10**6)), gid=st.integers(0, 2**62),
       mode=st.sampled_from(["basic", "compilable"]))
def test_a_doc_line_is_the_json_of_the_whole_doc(text, source, tokens, kind, lines, gid, mode):
    doc = Doc(text, tokens, kind, source, lines=lines)
    line = doc_line_of(doc, mode)
    whole = json.dumps({"text": text, "n_tokens": tokens, "mode": mode, "source": source,
                        "lines": list(lines) if lines is not None else None, "kind": kind}, ensure_ascii=False)
    assert output_line(line, source) == (whole + "\n").encode()
    assert from_staged(staged_line(line, source, gid)) == (digest_of(text), tokens, kind == "split", gid,
                                                           (whole + "\n").encode())

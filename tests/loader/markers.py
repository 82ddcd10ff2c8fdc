"""Per-document marker tokens: every document is BOS, a marker token naming it, then word tokens. From the rows a
run yielded and its final states (all ranks'), `check_each_document_used_once` tells whether every document its
logical streams read was used exactly once per epoch: placed in a row (its marker seen), still buffered or read
and waiting. Needs only pyarrow and numpy, as torchrun_elastic.py imports it."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

BOS, MARKER = 0, 1000  # word tokens are 1..999; document number d has the marker MARKER + d


class MarkerTokenizer:
    """Duck-typed tokenizer: "<number> <words>" -> [BOS, MARKER + number, one token per word]."""

    identity = "markers"

    def get_bos_token_id(self):
        return BOS

    def encode(self, texts, prepend=None, num_threads=4):
        encoded = []
        for text in texts:
            number, *words = text.split(" ")
            encoded.append([prepend, MARKER + int(number), *(1 + len(word) % 999 for word in words)])
        return encoded


def write_marker_corpus(data_dir, first: int, files: int = 3, docs_per_file: int = 48, row_group_size: int = 4,
                        seed: int = 0, max_words: int = 60) -> Path:
    """`files` train shards and a val shard (the last file) of documents numbered first, first + 1, ..."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    number = first
    for i in range(files + 1):
        texts = []
        for _ in range(docs_per_file):
            n_words = rng.choice([rng.randint(0, 6), rng.randint(0, max_words)])
            texts.append(" ".join([str(number), *("w" * rng.randint(1, 9) for _ in range(n_words))]))
            number += 1
        pq.write_table(pa.table({"text": texts}), data_dir / f"shard_{i:05d}.parquet", row_group_size=row_group_size)
    return data_dir


def train_documents(data_dir) -> dict[tuple[str, int, int], int]:
    """{(file name, row group, row): document number} of the train files (all but the last file)."""
    numbers = {}
    for path in sorted(Path(data_dir).glob("*.parquet"))[:-1]:
        pf = pq.ParquetFile(path)
        for rg in range(pf.num_row_groups):
            for row, text in enumerate(pf.read_row_group(rg, columns=["text"]).column("text").to_pylist()):
                numbers[path.name, rg, row] = int(text.split(" ", 1)[0])
    return numbers


def stream_parts(state: dict) -> tuple[int, list[tuple[int, list[dict], list]]]:
    """(logical streams, [(stream, its sources' positions, its buffer as [source, slot, rg, row(, offset)])])."""
    if state["version"] == 2:  # a default run: the rank is the stream, one source, nothing pending
        return state["world_size"], [(state["rank"], [{**state, "pending": []}],
                                      [[0, *doc_id] for doc_id in state["buffer"]])]
    return state["logical_streams"], [(part["stream"], part["sources"], part["buffer"]) for part in state["streams"]]


def check_each_document_used_once(rows: np.ndarray, final_states: list[dict], data_dirs: list,
                                  crop: str = "discard") -> int:
    """Assert that each train document was used once per time its logical stream read it: in epochs before the
    stream's current one, and in the current one if the cursor has passed it. Returns the lowest epoch the
    streams reached. With crop="discard" a document cropped to its BOS alone (a row ending in BOS) shows no
    marker (the shortest, often a document that is only [BOS, marker], is the one cropped so): uses may be
    missing, exactly as many as those rows."""
    documents = [train_documents(data_dir) for data_dir in data_dirs]
    file_index = [{name: i for i, name in enumerate(sorted({name for name, _, _ in docs}))} for docs in documents]
    markers = rows[rows >= MARKER] - MARKER
    observed = Counter(markers.tolist())
    expected, epochs, streams = Counter(), [], []
    for state in final_states:
        n, parts = stream_parts(state)
        for stream, sources, buffer in parts:
            streams.append(stream)
            names = []
            for i, source in enumerate(sources):
                names.append({slot: name for slot, name, *_ in source["files"]})
                epoch, cursor = source["cursor"][0], tuple(source["cursor"][1:])
                epochs.append(epoch)
                for (name, rg, row), number in documents[i].items():
                    if rg % n == stream:
                        expected[number] += epoch - 1 + ((file_index[i][name], rg, row) < cursor)
                for slot, rg, row in source["pending"]:
                    observed[documents[i][names[i][slot], rg, row]] += 1
            for source, slot, rg, row, *offset in buffer:  # a requeued tail past offset 1 has lost its marker
                if not offset or offset[0] == 1:
                    observed[documents[source][names[source][slot], rg, row]] += 1
    extra = observed - expected
    assert not extra, f"documents used more often than read (number: times): {dict(list(extra.items())[:8])}"
    missing = expected - observed
    lone_bos = int((rows[:, -1] == BOS).sum()) if crop == "discard" else 0
    assert sum(missing.values()) == lone_bos, \
        f"{sum(missing.values())} uses missing, {lone_bos} explained by rows ending in a lone BOS: " \
        f"{dict(list(missing.items())[:8])}"
    assert sorted(streams) == list(range(n)), f"the final states hold streams {sorted(streams)}, not all {n}"
    return min(epochs)

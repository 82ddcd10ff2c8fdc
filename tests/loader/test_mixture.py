"""Mixtures (sources=[{data_dir, weight}, ...]): exact resume at many k, over one source's epoch boundary; token
shares within one percentage point of the weights over any 1M tokens entering the buffer, measured from the rows'
markers and the states' buffers; a curriculum (reweight=True) keeps every document used once; the state stays
small; bad sources are refused in one line; val is read per source."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from batches import take
from markers import MARKER, MarkerTokenizer, check_each_document_used_once, write_marker_corpus

from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit


def _mixture(data_dirs, weights, B=3, T=24, **kwargs):
    kwargs = {"tokenizer_batch_size": 4, "buffer_size": 10, "device": "cpu", "prefetch": 0,
              "tokenizer": MarkerTokenizer(), **kwargs}
    sources = [{"data_dir": str(d), "weight": w} for d, w in zip(data_dirs, weights, strict=False)]
    return tokenizing_distributed_data_loader_with_state_bos_bestfit(B=B, T=T, split="train", sources=sources,
                                                                     **kwargs)


@pytest.fixture
def marker_dirs(tmp_path):
    """A corpus of 144 train docs and one of 36: the second ends its epoch about four times as often."""
    return [write_marker_corpus(tmp_path / "big", first=0),
            write_marker_corpus(tmp_path / "small", first=10_000, seed=1, docs_per_file=12)]


def _epochs(state):
    return [source["epoch"] for source in state["streams"][0]["sources"]]


@pytest.mark.parametrize("crop", ["discard", "requeue"])
@pytest.mark.parametrize("prefetch", [0, 3])
def test_resume_at_many_k_over_one_sources_epoch_boundary(marker_dirs, crop, prefetch):
    full = take(_mixture(marker_dirs, [1, 1], crop=crop, prefetch=prefetch), 50)
    boundaries = [k for k in range(1, 50) if _epochs(full[k][2]) != _epochs(full[k - 1][2])]
    assert any(_epochs(full[k][2])[0] == 1 and _epochs(full[k][2])[1] > 1 for k in boundaries)  # the small one wraps
    for k in sorted({0, 1, 2, 7, 30} | {k + d for k in boundaries[:3] for d in (-1, 0)}):
        resumed = _mixture(marker_dirs, [1, 1], crop=crop, prefetch=prefetch,
                           resume_state_dict=json.loads(json.dumps(full[k][2])))
        for j, (inputs, targets, state) in enumerate(take(resumed, 3), start=k + 1):
            assert torch.equal(inputs, full[j][0]) and torch.equal(targets, full[j][1]), f"batch {j} after {k}"
            assert state == full[j][2]


class LengthTokenizer:
    """"<source>:<number>" -> BOS, a marker naming the doc, filler: lengths log-normal (median ~600 tokens, a tail
    past T=2048), like web text, drawn once per doc number, at most `longest`."""

    def __init__(self, longest: int):
        lengths = np.random.default_rng(3).lognormal(6.4, 1.0, size=100_000)
        self.lengths = np.clip(lengths, 1, longest).astype(int)

    def get_bos_token_id(self):
        return 0

    def encode(self, texts, prepend=None, num_threads=4):
        encoded = []
        for text in texts:
            source, number = map(int, text.split(":"))
            encoded.append([prepend, MARKER + source * 100_000 + number, *[1] * int(self.lengths[number])])
        return encoded


DOCS_PER_FILE, ROW_GROUP = 2048, 256


def _number_corpus(data_dir, source, files):
    """`files` train shards + a val shard of texts "<source>:<number>"."""
    for i in range(files + 1):
        numbers = range(i * DOCS_PER_FILE, (i + 1) * DOCS_PER_FILE)
        data_dir.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"text": [f"{source}:{n}" for n in numbers]}), data_dir / f"shard_{i:05d}.parquet",
                       row_group_size=ROW_GROUP)
    return data_dir


def _entered_tokens(batches, T, crop, n_sources, lengths):
    """Per batch, the tokens each source has put in the buffer so far, from what was yielded alone: every entry
    of a doc shows its marker once, in a row or (not yet placed) in the state's buffer. A doc counts for at most
    a row with "discard" (the rest is cropped anyway), for all its tokens with "requeue"."""
    def counted(doc):
        n = int(lengths[doc % 100_000]) + 2
        return min(n, T + 1) if crop == "discard" else n

    placed, cumulative = np.zeros(n_sources), []
    for rows, state in batches:
        for doc in (rows[rows >= MARKER] - MARKER).tolist():
            placed[doc // 100_000] += counted(doc)
        buffered = np.zeros(n_sources)
        part = state["streams"][0]
        for source, slot, rg, row, *offset in part["buffer"]:
            if not offset or offset[0] == 1:  # its marker is not in a row yet
                name = next(name for s, name, *_ in part["sources"][source]["files"] if s == slot)
                buffered[source] += counted(source * 100_000 + int(name[6:11]) * DOCS_PER_FILE + rg * ROW_GROUP + row)
        cumulative.append(placed + buffered)
    return np.array(cumulative)


def _worst_window(cumulative, weights, window=1_000_000):
    """The largest gap between a source's share and its weight over spans of at least `window` tokens."""
    totals, shares, worst = cumulative.sum(axis=1), np.array(weights) / sum(weights), 0.0
    for a in range(len(totals)):
        b = int(np.searchsorted(totals, totals[a] + window))
        if b == len(totals):
            break
        worst = max(worst, float(np.abs((cumulative[b] - cumulative[a]) / (totals[b] - totals[a]) - shares).max()))
    return worst


# With "discard" a doc counts for at most T+1 tokens, so any length goes; with "requeue" it counts for all of them,
# and the shares can be off by about the longest doc over the span (a 30K-token doc is 3% of 1M tokens): 4K here.
@pytest.mark.parametrize("weights,crop,longest", [([0.3, 0.7], "discard", 10 ** 6), ([0.3, 0.7], "requeue", 4096),
                                                  ([5, 2, 1], "discard", 10 ** 6)])
def test_token_shares_stay_within_one_point_over_any_million_tokens(tmp_path, weights, crop, longest):
    B, T = 32, 2048
    tokenizer = LengthTokenizer(longest)
    data_dirs = [_number_corpus(tmp_path / f"s{i}", i, files=1 if i == 0 else 4) for i in range(len(weights))]
    loader = _mixture(data_dirs, weights, B=B, T=T, buffer_size=1000, tokenizer_batch_size=128, crop=crop,
                      tokenizer=tokenizer)
    batches = []
    for _ in range(70):  # 4.6M tokens
        inputs, targets, state = next(loader)
        batches.append((torch.cat([inputs, targets[:, -1:]], dim=1).numpy(), json.loads(json.dumps(state))))
    assert max(_epochs(batches[-1][1])) >= 2 and min(_epochs(batches[-1][1])) == 1  # source 0 wrapped on its own
    entered = _entered_tokens(batches, T, crop, len(weights), tokenizer.lengths)
    assert _worst_window(entered, weights) < 0.01
    # what the state counts; a doc cropped to its BOS alone (a row ending in BOS, about one row in ten here) shows
    # no marker, so a little more (about 0.5%; counting whole docs with "discard" would be some 20% more)
    assert np.all(entered[-1] <= batches[-1][1]["streams"][0]["taken"])
    assert np.allclose(entered[-1], batches[-1][1]["streams"][0]["taken"], rtol=0.01)


def test_the_buffer_refills_a_slice_at_a_time_as_with_one_source(marker_dirs):
    # refilled a document at a time, the buffer would stay at buffer_size and best-fit would crop about a third
    # more tokens of web-like lengths (simulate_crop_fraction with slice_size=1 rather than 128)
    def buffered(data_dirs, weights):
        return {len(state["streams"][0]["buffer"]) for _, _, state in take(_mixture(data_dirs, weights), 40)}

    assert buffered(marker_dirs, [1, 1]) == buffered(marker_dirs[:1], [1]) == set(range(9, 13))  # buffer 10, slice 4


def test_changed_weights_need_reweight_and_keep_every_document_used_once(marker_dirs):
    first = take(_mixture(marker_dirs, [1, 1]), 12)
    state = first[-1][2]
    with pytest.raises(ValueError, match=r"saved with weights=\[1.0, 1.0\], this loader has weights=\[1.0, 3.0\] "
                                         r"\(pass reweight=True"):
        _mixture(marker_dirs, [1, 3], resume_state_dict=state)
    second = take(_mixture(marker_dirs, [1, 3], resume_state_dict=state, reweight=True), 60)
    rows = np.concatenate([torch.cat([inputs, targets[:, -1:]], dim=1).numpy() for inputs, targets, _ in first + second])
    check_each_document_used_once(rows, [second[-1][2]], marker_dirs)
    taken = second[-1][2]["streams"][0]["taken"]  # counted from the resume on, toward the new weights
    assert abs(taken[1] / sum(taken) - 0.75) < 0.03
    assert second[-1][2]["weights"] == [1.0, 3.0]


@pytest.mark.parametrize("n_sources,limit", [(2, 64 * 1024), (8, 256 * 1024)])
def test_the_state_stays_small(tokenizer, corpus_dir, n_sources, limit):
    loader = tokenizing_distributed_data_loader_with_state_bos_bestfit(
        tokenizer, 4, 256, "train", device="cpu", crop="requeue", prefetch=0,
        sources=[{"data_dir": str(corpus_dir), "weight": 1 + i} for i in range(n_sources)])
    for _, _, state in take(loader, 6):
        assert len(state["streams"][0]["buffer"]) >= 999  # buffer_size, less the doc placed last
        assert len(json.dumps(state)) <= limit


@pytest.mark.parametrize("kwargs,match", [
    ({"sources": [], "data_dir": None}, r"sources must be a non-empty list of \{'data_dir': ..., 'weight': ...\}"),
    ({"sources": [{"data_dir": "x", "weight": 1}], "data_dir": "x"}, "pass data_dir or sources, not both"),
    ({"sources": [{"data_dir": "x"}]}, r"sources\[0\] must be a dict with exactly the keys data_dir and weight"),
    ({"sources": [{"data_dir": "x", "weight": 1, "split": "train"}]}, r"sources\[0\] must be a dict with exactly"),
    ({"sources": [{"data_dir": "x", "weight": 1}, {"data_dir": "y", "weight": 0}]},
     r"sources\[1\]\['weight'\] must be a number > 0, not 0"),
    ({"sources": [{"data_dir": "x", "weight": float("nan")}]}, r"sources\[0\]\['weight'\] must be a number > 0"),
    ({"sources": [{"data_dir": "x", "weight": True}]}, r"sources\[0\]\['weight'\] must be a number > 0, not True"),
    ({"sources": [{"data_dir": 3, "weight": 1}]}, r"sources\[0\]\['data_dir'\] must be a path \(a non-empty str or os.PathLike\), not 3"),
    ({"sources": "x"}, "sources must be a non-empty list"),
    ({"logical_streams": 0}, "logical_streams must be a whole number >= 1 and <= 65536, not 0"),
])
def test_bad_sources_are_refused_in_one_line(marker_dirs, kwargs, match):
    kwargs = kwargs if "sources" in kwargs else {"data_dir": marker_dirs[0], **kwargs}
    with pytest.raises(ValueError, match=match) as failure:
        tokenizing_distributed_data_loader_with_state_bos_bestfit(MarkerTokenizer(), 2, 16, "train", device="cpu",
                                                                  **kwargs)
    assert "\n" not in str(failure.value)


def test_a_state_of_other_sources_is_refused(marker_dirs):
    state = take(_mixture(marker_dirs, [1, 1]), 2)[-1][2]
    with pytest.raises(ValueError, match="saved by a loader of 2 sources, this loader has 3 sources"):
        _mixture(marker_dirs * 2, [1, 1, 1][:3], resume_state_dict=state)
    with pytest.raises(ValueError, match="saved by a loader of 2 sources, this loader has one data_dir"):
        tokenizing_distributed_data_loader_with_state_bos_bestfit(
            MarkerTokenizer(), 3, 24, "train", tokenizer_batch_size=4, buffer_size=10, device="cpu",
            data_dir=marker_dirs[0], logical_streams=1, resume_state_dict=state)
    single = take(_mixture(marker_dirs[:1], [1]), 1)[0][2]
    with pytest.raises(ValueError, match="saved by a loader of 1 sources, this loader has 2 sources"):
        _mixture(marker_dirs, [1, 1], resume_state_dict=single)


def test_val_is_read_per_source_or_mixed(marker_dirs):
    def val_markers(**kwargs):
        loader = tokenizing_distributed_data_loader_with_state_bos_bestfit(
            MarkerTokenizer(), 2, 24, "val", tokenizer_batch_size=4, buffer_size=6, device="cpu", prefetch=0, **kwargs)
        rows = torch.cat([inputs for inputs, _, _ in (next(loader) for _ in range(20))])
        return set((rows[rows >= MARKER] - MARKER).tolist())

    assert val_markers(data_dir=marker_dirs[0]) <= set(range(144, 192))  # the big corpus's val file
    assert val_markers(data_dir=marker_dirs[1]) <= set(range(10_036, 10_048))
    mixed = val_markers(sources=[{"data_dir": str(d), "weight": 1} for d in marker_dirs])
    assert mixed & set(range(144, 192)) and mixed & set(range(10_036, 10_048))
    assert mixed <= set(range(144, 192)) | set(range(10_036, 10_048))

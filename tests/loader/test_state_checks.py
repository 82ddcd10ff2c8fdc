"""A resume state records what its batches depend on; the loader refuses, in one line naming the field and both
values, a state from a changed file, other settings, another tokenizer, another mode, or a malformed state."""

import json

import pytest
import tiktoken
import torch
from batches import take
from corpus import make_docs, write_parquet
from loader_helpers import small_bestfit, small_concat, write_small_corpus

from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit
from nanodata.storage.files import file_digest
from nanodata.tokenizer import SPLIT_PATTERN, Tokenizer


def _state(tokenizer, data_dir, k=5, **kwargs):
    """The state yielded with batch k (JSON round-tripped), and the batches after it."""
    batches = take(small_bestfit(tokenizer, data_dir, prefetch=0, **kwargs), k + 3)
    return batches[k - 1][2], batches[k:]


def _refused(match, tokenizer, data_dir, state, make=small_bestfit, **kwargs):
    with pytest.raises(ValueError, match=match) as failure:
        make(tokenizer, data_dir, resume_state_dict=state, **kwargs)
    assert "\n" not in str(failure.value)
    return str(failure.value)


def _buffered_file(state):
    """A file that holds buffered docs and is not the file the cursor reads next."""
    slots = {doc_id[0] for doc_id in state["buffer"]}
    return next(name for slot, name, *_ in state["files"] if slot in slots and name != state["cursor_file"])


def test_a_buffered_file_rewritten_with_the_same_shape_is_refused(tokenizer, tmp_path):
    data_dir = write_small_corpus(tmp_path)
    state, _ = _state(tokenizer, data_dir, k=12)
    name = _buffered_file(state)
    write_parquet(data_dir / name, make_docs(40, seed=999, max_words=80), row_group_size=8)  # 40 rows, 5 groups
    _refused(rf"{name} changed since the resume state was saved: (bytes|footer) was .*, is ", tokenizer, data_dir,
             state)


def test_a_file_the_manifest_records_another_checksum_for_is_refused(tokenizer, tmp_path):
    data_dir = write_small_corpus(tmp_path)
    names = sorted(p.name for p in data_dir.glob("*.parquet"))
    manifest = {"version": 1, "shards": [{"name": name, "crc32c": file_digest(data_dir / name, "crc32c")}
                                         for name in names[:-1]], "val": {"name": names[-1]}}
    (data_dir / "manifest.json").write_text(json.dumps(manifest))
    state, _ = _state(tokenizer, data_dir, k=12)
    name = _buffered_file(state)
    assert [entry[4] for entry in state["files"]] == [file_digest(data_dir / n, "crc32c") for _, n, *_ in
                                                      state["files"]]
    manifest["shards"][names.index(name)]["crc32c"] = "AAAAAA=="  # the file was rebuilt, the footer is the same
    (data_dir / "manifest.json").write_text(json.dumps(manifest))
    _refused(rf"{name} changed since the resume state was saved: crc32c was '.*', is 'AAAAAA=='", tokenizer,
             data_dir, state)


def test_a_state_saved_before_the_manifest_was_written_resumes_exactly(tokenizer, tmp_path):
    data_dir = write_small_corpus(tmp_path)
    state, after = _state(tokenizer, data_dir, k=12)
    names = sorted(p.name for p in data_dir.glob("*.parquet"))
    manifest = {"version": 1, "shards": [{"name": name, "crc32c": file_digest(data_dir / name, "crc32c")}
                                         for name in names[:-1]], "val": {"name": names[-1]}}
    (data_dir / "manifest.json").write_text(json.dumps(manifest))
    inputs, targets, _ = take(small_bestfit(tokenizer, data_dir, prefetch=0, resume_state_dict=state), 1)[0]
    assert torch.equal(inputs, after[0][0]) and torch.equal(targets, after[0][1])


@pytest.mark.parametrize("setting,value,match", [
    ("B", 3, "saved with B=2, this loader has B=3"), ("T", 40, "saved with T=48, this loader has T=40"),
    ("buffer_size", 31, "saved with buffer_size=30, this loader has buffer_size=31"),
    ("crop", "requeue", "saved with crop='discard', this loader has crop='requeue'"),
    ("tokenizer_batch_size", 16, "saved with tokenizer_batch_size=8, this loader has tokenizer_batch_size=16"),
])
def test_other_settings_are_refused(tokenizer, tmp_path, setting, value, match):
    data_dir = write_small_corpus(tmp_path)
    state, _ = _state(tokenizer, data_dir)
    _refused(match, tokenizer, data_dir, state, **{setting: value})


def _byte_level_tokenizer():
    ranks = {bytes([i]): i for i in range(256)}
    encoding = tiktoken.Encoding(name="bytes", pat_str=SPLIT_PATTERN, mergeable_ranks=ranks,
                                 special_tokens={"<|endoftext|>": 256})
    return Tokenizer(encoding, "<|endoftext|>", "bytes")


def test_another_tokenizer_is_refused(tokenizer, tmp_path):
    data_dir = write_small_corpus(tmp_path)
    state, _ = _state(tokenizer, data_dir)
    other = _byte_level_tokenizer()
    _refused(f"saved with tokenizer='{tokenizer.identity}', this loader has tokenizer='{other.identity}'",
             other, data_dir, state)


class NanochatLikeTokenizer:
    """nanochat's tokenizer shape: a tiktoken Encoding in `.enc`, no `identity`."""

    def __init__(self, inner):
        self.enc, self.inner = inner.encoding, inner

    def get_bos_token_id(self):
        return self.inner.get_bos_token_id()

    def encode(self, texts, prepend=None, num_threads=4):
        return self.inner.encode(texts, prepend=prepend, num_threads=num_threads)


class OpaqueTokenizer(NanochatLikeTokenizer):
    """Neither `identity` nor a tiktoken encoding: it cannot be told apart from another such tokenizer."""

    def __init__(self, inner):
        self.inner = inner


def test_a_tokenizer_wrapping_the_same_tiktoken_encoding_resumes_exactly(tokenizer, tmp_path):
    data_dir = write_small_corpus(tmp_path)
    state, after = _state(tokenizer, data_dir)
    resumed = small_bestfit(NanochatLikeTokenizer(tokenizer), data_dir, prefetch=0, resume_state_dict=state)
    inputs, targets, _ = take(resumed, 1)[0]
    assert torch.equal(inputs, after[0][0]) and torch.equal(targets, after[0][1])


def test_a_tokenizer_without_identity_records_none_and_needs_one_alike(tokenizer, tmp_path):
    data_dir = write_small_corpus(tmp_path)
    state, after = _state(OpaqueTokenizer(tokenizer), data_dir)
    assert state["tokenizer"] is None
    _refused(f"saved with tokenizer=None, this loader has tokenizer='{tokenizer.identity}'", tokenizer, data_dir,
             state)
    inputs, _, _ = take(small_bestfit(OpaqueTokenizer(tokenizer), data_dir, prefetch=0, resume_state_dict=state), 1)[0]
    assert torch.equal(inputs, after[0][0])


def test_a_non_streaming_state_is_refused_by_a_streaming_loader(tokenizer, tmp_path):
    data_dir = write_small_corpus(tmp_path)
    (data_dir / "_COMPLETE").write_text("")
    state, _ = _state(tokenizer, data_dir)
    _refused("saved with streaming=False, this loader has streaming=True", tokenizer, data_dir, state,
             streaming=True, poll_interval=0.02)


def test_a_state_of_the_other_split_is_refused(tokenizer, tmp_path):
    data_dir = write_small_corpus(tmp_path)
    state, _ = _state(tokenizer, data_dir)
    _refused("saved with split='train', this loader has split='val'", tokenizer, data_dir, state, make=_val_bestfit)


def _val_bestfit(tokenizer, data_dir, **kwargs):
    return tokenizing_distributed_data_loader_with_state_bos_bestfit(
        tokenizer, 2, 48, "val", tokenizer_batch_size=8, device="cpu", buffer_size=30, data_dir=data_dir, **kwargs)


def test_nanochat_state_needs_exactly_its_three_keys(tokenizer, tmp_path):
    data_dir = write_small_corpus(tmp_path)
    state, _ = _state(tokenizer, data_dir)
    without_version = {key: value for key, value in state.items() if key != "version"}
    _refused(r"has no 'version'.*exactly the keys pq_idx, rg_idx, epoch \(it has .*'buffer'", tokenizer, data_dir,
             without_version)
    _refused(r"has no 'version'.*\(it has 'pq_idx', 'rg_idx'\)", tokenizer, data_dir, {"pq_idx": 0, "rg_idx": 0})
    _refused(r"epoch must be an integer >= 1, not '1'", tokenizer, data_dir, {"pq_idx": 0, "rg_idx": 0, "epoch": "1"})


def test_a_state_of_an_older_version_is_refused_with_the_way_out(tokenizer, tmp_path):
    data_dir = write_small_corpus(tmp_path)
    state, _ = _state(tokenizer, data_dir)
    _refused(r"has version 1; this loader reads versions 2 and 3 \(pass only its pq_idx, rg_idx, epoch", tokenizer,
             data_dir, {**state, "version": 1})


def _edit(state, key, value):
    return {**state, key: value}


@pytest.mark.parametrize("edit,match", [
    (lambda s: {k: v for k, v in s.items() if k != "cursor"}, "key 'cursor' is missing"),
    (lambda s: {k: v for k, v in s.items() if k != "T"}, "key 'T' is missing"),
    (lambda s: dict(list(s.items())[:len(s) // 2]), "key '.*' is missing"),  # truncated
    (lambda s: _edit(s, "cursor", "1,0,3,0"), "cursor must be a list of 4 items, not '1,0,3,0'"),
    (lambda s: _edit(s, "cursor", [1, 0, 3]), r"cursor must be a list of 4 items, not \[1, 0, 3\]"),
    (lambda s: _edit(s, "cursor", [1, -1, 0, 0]), r"cursor\[1\] must be an integer >= 0, not -1"),
    (lambda s: _edit(s, "epoch_has_docs", 1), "epoch_has_docs must be true or false, not 1"),
    (lambda s: _edit(s, "files", {}), "files must be a list, not {}"),
    (lambda s: _edit(s, "files", [f[:2] for f in s["files"]]), r"files\[0\] must be a list of 5 items"),
    (lambda s: _edit(s, "files", [[f[0], "../" + f[1], *f[2:]] for f in s["files"]]),
     r"files\[0\]\[1\] must be a file name"),
    (lambda s: _edit(s, "buffer", [[0, 0]] + s["buffer"]), r"buffer\[0\] must be a list of 3 or 4 items"),
    (lambda s: _edit(s, "buffer", [[0, 0, "2"]] + s["buffer"]), r"buffer\[0\]\[2\] must be an integer >= 0"),
    (lambda s: _edit(s, "buffer", [[77, 0, 2]] + s["buffer"]), r"buffer\[0\]\[0\] must be a slot listed in files"),
    (lambda s: _edit(s, "buffer", [[s["buffer"][0][0], 0, 500]]), r"names row 500 of .* row group 0, which has 8"),
    (lambda s: _edit(s, "buffer", [[s["buffer"][0][0], 99, 0]]), r"names row group 99 of .*, which has 5"),
    (lambda s: _edit(s, "buffer", [[*s["buffer"][0][:3], 10 ** 6]]), r"buffer\[0\]\[3\] must be below"),
    (lambda s: _edit(s, "surprise", 1), "unexpected key.*'surprise'"),
    (lambda s: _edit(s, "version", "2"), "has version '2'"),
    (lambda s: [s, s], r"resume_state_dict\[0\] was saved by rank 0 of 1; a list must hold the states of ranks "
                       r"0..1 of 2, in rank order"),
    (lambda s: [], r"must be a dict.*or the list of all ranks' states, not \[\]"),
    (lambda s: [{k: v for k, v in s.items() if k != "version"}], r"resume_state_dict\[0\] must be a state yielded"),
])
def test_malformed_states_are_refused_in_one_line_naming_the_key(tokenizer, tmp_path, edit, match):
    data_dir = write_small_corpus(tmp_path)
    state, _ = _state(tokenizer, data_dir, k=3)
    _refused(match, tokenizer, data_dir, edit(state))


def test_row_groups_of_another_rank_are_refused(tokenizer, tmp_path):
    data_dir = write_small_corpus(tmp_path)
    state, _ = _state(tokenizer, data_dir, rank=1, world_size=2)
    _refused(r"cursor\[2\] must be a row group of rank 1 of 2, not 2", tokenizer, data_dir,
             _edit(state, "cursor", [*state["cursor"][:2], 2, 0]), rank=1, world_size=2)
    _refused(r"buffer\[0\]\[1\] must be a row group of rank 1 of 2, not 0", tokenizer, data_dir,
             _edit(state, "buffer", [[state["buffer"][0][0], 0, 0]]), rank=1, world_size=2)


def test_a_concatenation_state_offsets_only_its_first_doc(tokenizer, tmp_path):
    data_dir = write_small_corpus(tmp_path)
    state = take(small_concat(tokenizer, data_dir, prefetch=0), 3)[-1][2]
    state["buffer"] = [[*doc_id[:3], 1] for doc_id in state["buffer"]]
    _refused(r"buffer\[1\] must be \[slot, row group, row\]", tokenizer, data_dir, state, make=small_concat)


def test_a_state_names_only_the_files_it_needs_and_stays_small(tokenizer, tmp_path):
    data_dir = write_small_corpus(tmp_path)
    state, _ = _state(tokenizer, data_dir)
    buffered = {doc_id[0] for doc_id in state["buffer"]}
    named = {slot for slot, *_ in state["files"]}
    assert named == buffered | {slot for slot, name, *_ in state["files"] if name == state["cursor_file"]}
    assert all(entry[2] == (data_dir / entry[1]).stat().st_size for entry in state["files"])
    assert len(json.dumps(state)) < 600 + 16 * len(state["buffer"])

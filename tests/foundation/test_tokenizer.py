"""nanodata.tokenizer (load, Tokenizer) and nanodata.pipeline.tokenizer_train (rustbpe training)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from corpus import make_docs, write_parquet

from nanodata.errors import NanodataError
from nanodata.pipeline.tokenizer_train import MAX_VOCAB, MIN_VOCAB, train_tokenizer
from nanodata.tokenizer import SPECIAL_TOKENS, load

NANODATA = str(Path(sys.executable).with_name("nanodata"))


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory):
    """A 400-token BPE trained on a 4-file corpus (last file = val)."""
    from corpus import write_corpus

    corpus = tmp_path_factory.mktemp("tok_corpus")
    write_corpus(corpus)
    return train_tokenizer(corpus, 400, tmp_path_factory.mktemp("tok") / "bpe400")


def test_cl100k_works_offline(tokenizer):
    assert tokenizer.n_vocab == 100277
    assert tokenizer.get_bos_token_id() == tokenizer.encoding.encode_single_token("<|endoftext|>")
    ids = tokenizer.encode("hello world")
    assert ids == [15339, 1917] and tokenizer.decode(ids) == "hello world"


def test_batch_encode_with_prepend_append(tokenizer):
    docs = ["alpha beta", "", "γάμμα 🙂"]
    bos = tokenizer.get_bos_token_id()
    batch = tokenizer.encode(docs, prepend=bos, append="<|endoftext|>", num_threads=2)
    assert batch == [[bos, *tokenizer.encode(d), bos] for d in docs]
    assert [tokenizer.decode(ids[1:-1]) for ids in batch] == docs
    assert tokenizer.count_tokens("alpha beta") == len(tokenizer.encode("alpha beta"))
    with pytest.raises(TypeError):
        tokenizer.encode(42)


def test_gpt2_offline_gives_clear_message(monkeypatch, tmp_path):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty cache: tiktoken must download
    with pytest.raises(NanodataError, match="'gpt2'.*not in tiktoken's cache.*TIKTOKEN_CACHE_DIR"):
        load("gpt2")


def test_unknown_spec(tmp_path):
    with pytest.raises(NanodataError, match="not a directory nor a known tiktoken encoding"):
        load("no_such_encoding")
    with pytest.raises(NanodataError, match="not a tokenizer directory"):
        load(str(tmp_path))


def test_damaged_tokenizer_dir_names_it(trained_dir, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(trained_dir, broken)
    config = json.loads((broken / "tokenizer.json").read_text())
    del config["bos_token"]
    (broken / "tokenizer.json").write_text(json.dumps(config))
    with pytest.raises(NanodataError, match="broken: unreadable tokenizer files"):
        load(str(broken))
    shutil.copy(trained_dir / "tokenizer.json", broken / "tokenizer.json")
    assert load(str(broken)).n_vocab == 400
    load.cache_clear()
    (broken / "mergeable_ranks.tiktoken").unlink()
    with pytest.raises(NanodataError, match="broken: unreadable tokenizer files"):
        load(str(broken))


def test_trained_tokenizer_layout_and_roundtrip(trained_dir):
    tok = load(str(trained_dir))
    assert tok.n_vocab == 400
    config = json.loads((trained_dir / "tokenizer.json").read_text())
    assert config["special_tokens"] == {name: 400 - len(SPECIAL_TOKENS) + i for i, name in enumerate(SPECIAL_TOKENS)}
    assert tok.get_bos_token_id() == 400 - len(SPECIAL_TOKENS)
    for doc in make_docs(50, seed=7) + ["naïve café — 東京 🙂\n\n\t x"]:
        ids = tok.encode(doc)
        assert max(ids, default=0) < tok.get_bos_token_id()  # ordinary text never yields a special id
        assert tok.decode(ids) == doc
    # merges were learned from the corpus: its frequent words are single tokens
    assert len(tok.encode(" the")) == 1 and len(tok.encode("doc0-1: the model")) < len("doc0-1: the model")


def test_trained_tokenizer_loads_in_a_fresh_process(trained_dir):
    code = ("import sys; from nanodata.tokenizer import load; t = load(sys.argv[1]); "
            "print(t.n_vocab, t.get_bos_token_id(), t.decode(t.encode('shard loader')))")
    out = subprocess.run([sys.executable, "-c", code, str(trained_dir)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["400", "391", "shard", "loader"]


def test_training_is_deterministic_and_respects_max_chars(corpus_dir, tmp_path, trained_dir):
    again = train_tokenizer(corpus_dir, 400, tmp_path / "again")
    for name in ("tokenizer.json", "mergeable_ranks.tiktoken"):
        assert (again / name).read_bytes() == (trained_dir / name).read_bytes()
    few = load(str(train_tokenizer(corpus_dir, 400, tmp_path / "few", max_chars=200, doc_cap=50)))
    assert few.n_vocab < 400  # 200 characters cannot support 135 merges


def test_retrain_into_same_dir_is_not_served_from_cache(corpus_dir, tmp_path):
    out, text = tmp_path / "bpe", "the model learns from data token shard loader"
    small = load(str(train_tokenizer(corpus_dir, 300, out)))
    assert small.n_vocab == 300
    big = load(str(train_tokenizer(corpus_dir, 400, out)))
    assert big.n_vocab == 400 and len(big.encode(text)) < len(small.encode(text))
    assert max(big.encoding._mergeable_ranks.values()) == 400 - len(SPECIAL_TOKENS) - 1


def test_vocab_out_of_range_names_parameter(corpus_dir, tmp_path):
    for vocab_size in (100, MAX_VOCAB + 1):
        with pytest.raises(NanodataError, match=f"--vocab-size must be between {MIN_VOCAB} .* and {MAX_VOCAB}, "
                                                f"not {vocab_size}"):
            train_tokenizer(corpus_dir, vocab_size, tmp_path / "x")


def test_every_argument_is_checked_before_training(corpus_dir, tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("a file the user keeps")
    proc = subprocess.run([NANODATA, "tokenizer", "train", "--input", corpus_dir, "--vocab-size", "300",
                           "--out", taken], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert f"--out {taken}: exists and is not a directory" in proc.stderr
    assert taken.read_text() == "a file the user keeps"
    out = tmp_path / "out"
    cases = [((corpus_dir, 300, taken / "sub"), {}, f"--out {taken / 'sub'}: {taken} is not a directory"),
             ((corpus_dir, 300, out), {"max_chars": 0}, "--max-chars must be >= 1, not 0"),
             ((corpus_dir, 300, out), {"doc_cap": -5}, "--doc-cap must be >= 1, not -5"),
             ((tmp_path / "missing", 300, out), {}, "data dir .*missing does not exist")]
    for args, kwargs, message in cases:
        with pytest.raises(NanodataError, match=message):
            train_tokenizer(*args, **kwargs)
    (corpus_dir / "shard_00002.parquet").write_bytes(b"PAR1 cut short")  # the last train file: read last
    with pytest.raises(NanodataError, match=r"shard_00002\.parquet: not a readable parquet file"):
        train_tokenizer(corpus_dir, 300, out)
    assert not out.exists()


def test_single_file_input_has_no_train_split(tmp_path):
    write_parquet(tmp_path / "in" / "shard_00000.parquet", make_docs(20))
    with pytest.raises(NanodataError, match="no train files"):
        train_tokenizer(tmp_path / "in", 300, tmp_path / "out")
    assert not (tmp_path / "out").exists()

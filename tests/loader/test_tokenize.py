"""The loader's encoder gives exactly `tokenizer.encode(texts, prepend=bos)`: for nanodata's tokenizer by its
numpy path (special-token text, lone surrogates, empty and long documents included, on 1 or more threads), and
for any other tokenizer by calling its encode."""

import numpy as np
import pytest
from corpus import make_docs

from nanodata.loader.packing import with_bos
from nanodata.loader.tokenize import batch_encoder

TRICKY = ["", " ", "\n\n\n", "hello world", "<|endoftext|> is text here", "a <|bos|> b <|fim_prefix|>",
          "lone \ud800 surrogate", "naïve café 東京 🚀 𝄞", "x" * 5000, "  spaces   and\ttabs\r\n", "1234567890" * 30]


@pytest.mark.parametrize("threads", [1, 3])
def test_nanodata_tokenizer_ids_equal_its_encode(tokenizer, threads):
    bos = tokenizer.get_bos_token_id()
    texts = TRICKY + make_docs(200, seed=5)
    got = batch_encoder(tokenizer, bos, threads)(texts)
    assert all(isinstance(ids, np.ndarray) and ids.dtype == np.uint32 for ids in got)
    assert [ids.tolist() for ids in got] == tokenizer.encode(texts, prepend=bos)


def test_another_tokenizer_is_called_through_its_encode():
    calls = []

    class Stub:
        def encode(self, texts, prepend=None, num_threads=8):
            calls.append((list(texts), prepend, num_threads))
            return [[prepend, len(text)] for text in texts]

    assert batch_encoder(Stub(), 7, 2)(["ab", "c"]) == [[7, 2], [7, 1]]
    assert calls == [(["ab", "c"], 7, 2)]


def test_with_bos_keeps_the_kind_and_never_changes_its_input():
    tokens = np.arange(5, dtype=np.uint32)
    out = with_bos(9, tokens[2:])
    assert out.dtype == np.uint32 and out.tolist() == [9, 2, 3, 4] and tokens.tolist() == [0, 1, 2, 3, 4]
    assert with_bos(9, [1, 2]) == [9, 1, 2]


def test_feeds_calling_at_once_encode_one_slice_at_a_time():
    """A mixture's or several logical streams' feeds call from their own threads: the tokenizer's threads must
    not be multiplied by the number of feeds."""
    import threading
    import time

    running, most = [0], [0]
    guard = threading.Lock()

    class Slow:
        def encode(self, texts, prepend=None, num_threads=8):
            with guard:
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(0.02)
            with guard:
                running[0] -= 1
            return [[prepend] for _ in texts]

    encode = batch_encoder(Slow(), 7, 2)
    feeds = [threading.Thread(target=lambda: [encode(["x"]) for _ in range(5)]) for _ in range(4)]
    for feed in feeds:
        feed.start()
    for feed in feeds:
        feed.join()
    assert most[0] == 1

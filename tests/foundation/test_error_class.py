"""One error class: whatever the entry point, a user's mistake is a NanodataError (a ValueError too) with a one-line
message. Every public entry point gets the same bad values in each argument a user fills in: none, negative, zero,
nan, inf, huge, text where a number goes, a number where text goes, missing paths, a file where a directory goes."""

import math

import pytest

from nanodata import loader as loaders
from nanodata.errors import NanodataError
from nanodata.lite import DataLoaderLite

BAD = [None, -1, 0, math.nan, math.inf, 10**20, "x", 3.5, "{root}/missing", "{root}/file.txt", ""]


def loader_call(name, **override):
    def call(tokenizer, corpus_dir):
        kwargs = {"tokenizer": tokenizer, "B": 2, "T": 16, "split": "train", "device": "cpu", "data_dir": corpus_dir,
                  "tokenizer_batch_size": 8, **({"buffer_size": 20} if "bestfit" in name else {}), **override}
        loader = getattr(loaders, name)(**kwargs)
        with loader:
            next(loader)
    return call


def entry_points():
    """(name, argument, fn(tokenizer, corpus_dir, value), values of BAD that are fine there)."""
    points = []
    for name in loaders.LOADERS:
        for arg in ("tokenizer", "B", "T", "split", "data_dir", "resume_state_dict", "prefetch", "rank",
                    "world_size", "tokenizer_threads", "cache_bytes", "poll_interval"):
            fine = {"resume_state_dict": [None], "prefetch": [0], "rank": [None, 0], "world_size": [None],
                    "poll_interval": [3.5], "cache_bytes": [0]}.get(arg, [])
            points.append((name, arg, lambda t, d, v, name=name, arg=arg: loader_call(name, **{arg: v})(t, d), fine))
        if "bestfit" in name:
            points.append((name, "crop", lambda t, d, v, name=name: loader_call(name, crop=v)(t, d), []))
            points.append((name, "buffer_size", lambda t, d, v, name=name: loader_call(name, buffer_size=v)(t, d), []))
            points.append((name, "logical_streams", lambda t, d, v, name=name: loader_call(name, logical_streams=v)(t, d),
                           [None]))
    lite = {"B": 1, "T": 8, "process_rank": 0, "num_processes": 1, "split": "train", "data_root": None}
    for arg in lite:
        points.append(("DataLoaderLite", arg, lambda t, d, v, arg=arg: DataLoaderLite(**{**lite, arg: v}), []))

    def load(t, d, v):
        from nanodata.tokenizer import load
        load(v)
    points.append(("tokenizer.load", "spec", load, []))

    def split_files(t, d, v):
        from nanodata.dataset import files_for_split
        files_for_split(v, d)
    points.append(("dataset.files_for_split", "split", split_files, []))

    def data_dir(t, d, v):
        from nanodata.dataset import files_for_split
        files_for_split("train", v)
    points.append(("dataset.files_for_split", "data_dir", data_dir, [None]))
    return points


POINTS = entry_points()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-values")
    (root / "file.txt").write_text("a plain file\n")
    return root


@pytest.mark.parametrize("name, arg, call, fine", POINTS, ids=[f"{p[0]}-{p[1]}" for p in POINTS])
def test_the_same_bad_values_give_one_error_class(tokenizer, corpus_dir, root, name, arg, call, fine, monkeypatch):
    monkeypatch.setenv("NANODATA_DATA_DIR", str(root / "missing"))  # data_dir=None: the default location, missing
    for value in BAD:
        if isinstance(value, str):
            value = value.replace("{root}", str(root))
        if any(value is f or value == f for f in fine):
            continue
        try:
            call(tokenizer, corpus_dir, value)
        except NanodataError as exc:
            assert isinstance(exc, ValueError)
            message = str(exc)
            assert message and "\n" not in message, (name, arg, value, message)
        except Exception as exc:  # noqa: BLE001 - the point of the test
            pytest.fail(f"{name}({arg}={value!r}) raised {type(exc).__name__}: {exc}")
        else:
            pytest.fail(f"{name}({arg}={value!r}) raised nothing")

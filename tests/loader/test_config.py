"""LoaderConfig: the loaders' settings, frozen and keyword-only, checked once; the nanochat signatures are thin
wrappers over it, so a config and the same keyword arguments give the same batches and states."""

import dataclasses

import pytest
from batches import take
from loader_helpers import assert_same_batches, small_bestfit, small_concat, write_manifest_corpus

from nanodata.errors import NanodataError
from nanodata.loader import LoaderConfig, bestfit_loader, concat_loader


def test_frozen_and_keyword_only(tmp_path):
    config = LoaderConfig(B=2, T=16, data_dir=tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.B = 4
    with pytest.raises(TypeError):
        LoaderConfig(2, 16)


@pytest.mark.parametrize("settings, says", [
    ({"B": 0}, "B must be a whole number >= 1 and <= 1048576, not 0"),
    ({"T": 2.5}, "T must be a whole number >= 1 and .*, not 2.5"),
    ({"buffer_size": True}, "buffer_size must be a whole number >= 1 and .*, not True"),
    ({"split": "test"}, "split must be 'train' or 'val', not 'test'"),
    ({"crop": "drop"}, "crop must be one of"),
    ({"logical_streams": 0}, "logical_streams must be a whole number >= 1"),
    ({"prefetch": -1}, "prefetch must be a whole number >= 0 and <= 1024, not -1"),
    ({"poll_interval": float("nan")}, "poll_interval must be a finite number > 0 .*, not nan"),
    ({"cache_bytes": -1}, "cache_bytes must be a whole number >= 0"),
    ({"data_dir": 3}, "data_dir must be a path"),
    ({"sources": []}, "sources must be a non-empty list"),
    ({"sources": [{"data_dir": "a", "weight": 0}]}, r"sources\[0\]\['weight'\] must be a number > 0, not 0"),
    ({"sources": [{"data_dir": "a"}]}, r"sources\[0\] must be a dict with exactly the keys data_dir and weight"),
    ({"sources": [{"data_dir": "a", "weight": 1}], "data_dir": "b"}, "pass data_dir or sources, not both"),
])
def test_bad_settings_are_one_line_errors_naming_the_setting(settings, says):
    with pytest.raises(NanodataError, match=says) as failure:
        LoaderConfig(**{"B": 2, "T": 16, **settings})
    assert "\n" not in str(failure.value)


def test_a_mixture_is_normalised_to_sources_with_float_weights(tmp_path):
    config = LoaderConfig(B=2, T=16, sources=[{"data_dir": tmp_path / "a", "weight": 1},
                                              {"data_dir": tmp_path / "b", "weight": 3}])
    assert config.weights == [1.0, 3.0] and config.data_dirs == [tmp_path / "a", tmp_path / "b"]


def test_a_config_gives_the_batches_of_the_nanochat_signature(tokenizer, tmp_path):
    data_dir = write_manifest_corpus(tmp_path / "c")
    config = LoaderConfig(B=2, T=48, data_dir=data_dir, tokenizer_batch_size=8, buffer_size=30)
    assert_same_batches(take(bestfit_loader(config, tokenizer, device="cpu"), 12),
                        take(small_bestfit(tokenizer, data_dir), 12))
    assert_same_batches(take(concat_loader(config, tokenizer, device="cpu"), 12),
                        take(small_concat(tokenizer, data_dir), 12))


def test_the_concatenating_loader_refuses_best_fit_settings(tokenizer, tmp_path):
    config = LoaderConfig(B=2, T=48, sources=[{"data_dir": tmp_path, "weight": 1}])
    with pytest.raises(ValueError, match="settings of the best-fit loader"):
        concat_loader(config, tokenizer, device="cpu")

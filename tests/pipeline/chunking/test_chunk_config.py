"""ChunkConfig: the chunker's settings, frozen and keyword-only, checked once; its defaults are the CLI's and the
DAG Params' (nanodata.ranges), and a config gives the output of the same keywords."""

import dataclasses

import pytest

from nanodata.errors import NanodataError
from nanodata.pipeline.chunkbuild.config import ChunkConfig
from nanodata.pipeline.chunkbuild.executor import chunk_to_jsonl
from nanodata.ranges import MAX_TOKENS, PARTITION_MB

GOOD = '{"text": "int add(int a, int b) { return a + b; }\\nint twice(int x) { return add(x, x); }\\n", "path": "a.cc"}\n'


def test_frozen_keyword_only_and_defaults_from_the_ranges_table():
    config = ChunkConfig()
    assert config.max_tokens == MAX_TOKENS.default and config.partition_mb == PARTITION_MB.default
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.mode = "compilable"
    with pytest.raises(TypeError):
        ChunkConfig("basic")


@pytest.mark.parametrize("settings, says", [
    ({"mode": "fancy"}, "--mode 'fancy': expected one of"),
    ({"max_tokens": 15}, "--max-tokens must be a whole number >= 16"),
    ({"cross_depth": -1}, "--cross-depth must be a whole number >= 0"),
    ({"max_file_bytes": 10 ** 20}, "--max-file-bytes must be a whole number >= 1 and <= 1073741824"),
    ({"workers": 10 ** 9}, "--workers must be a whole number >= 1 and <= "),
    ({"partition_mb": float("nan")}, "--partition-mb must be a finite number > 0"),
    ({"tokenizer": "no-such-encoding"}, "no-such-encoding"),
])
def test_bad_settings_are_one_line_errors_naming_the_flag(settings, says):
    with pytest.raises(NanodataError, match=says) as failure:
        ChunkConfig(**settings)
    assert "\n" not in str(failure.value)


def test_a_config_gives_the_output_of_the_same_keywords(tmp_path):
    (tmp_path / "in.jsonl").write_text(GOOD * 3)
    by_config = chunk_to_jsonl(tmp_path / "a.jsonl", inputs=[tmp_path / "in.jsonl"],
                               config=ChunkConfig(mode="dep-aware", max_tokens=64))
    by_keywords = chunk_to_jsonl(tmp_path / "b.jsonl", inputs=[tmp_path / "in.jsonl"], mode="dep-aware",
                                 max_tokens=64)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert by_config["docs"] == by_keywords["docs"] > 0

"""The secret that authenticates what a build reads back (nanodata.storage.auth): where it comes from, the file made
on first use (0600, atomically, refused in one line when others may read it or its size is wrong), and sealed
staged files, taken only where they were put, as they were written, under the same secret."""

import multiprocessing
import os
import shutil

import pytest

from nanodata.errors import NanodataError
from nanodata.storage import auth


@pytest.fixture
def config(tmp_path, monkeypatch):
    """No secret in the environment; the config directory in tmp_path."""
    monkeypatch.delenv(auth.SECRET_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "nanodata" / "cache_secret"


def test_the_secret_is_the_given_value_else_the_environment_else_the_file(config, monkeypatch):
    from_file = auth.load_secret()
    assert config.is_file() and (config.stat().st_mode & 0o777) == 0o600 and len(config.read_bytes()) == 32
    assert oct(config.parent.stat().st_mode & 0o777) == oct(0o700)
    assert auth.load_secret().key == from_file.key  # made once, then read
    monkeypatch.setenv(auth.SECRET_ENV, "an environment secret of enough length")
    from_env = auth.load_secret()
    assert from_env.key != from_file.key and from_env.origin == auth.SECRET_ENV
    given = auth.load_secret("a Variable's secret, long enough")
    assert given.key not in (from_env.key, from_file.key) and auth.load_secret(given) is given
    assert "key" not in repr(given) and given.key.hex() not in repr(given)


def test_without_xdg_config_home_the_file_is_under_home(tmp_path, monkeypatch):
    monkeypatch.delenv(auth.SECRET_ENV, raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    auth.load_secret()
    assert (tmp_path / ".config" / "nanodata" / "cache_secret").is_file()


@pytest.mark.parametrize("value", ["short", "   padded short   "])
def test_a_short_secret_is_refused_in_one_line(config, monkeypatch, value):
    with pytest.raises(NanodataError, match=r"^the given cache secret: \d+ characters; .* at least 16") as info:
        auth.load_secret(value)
    assert "\n" not in str(info.value)
    monkeypatch.setenv(auth.SECRET_ENV, value)
    with pytest.raises(NanodataError, match=rf"^{auth.SECRET_ENV}: "):
        auth.load_secret()


def test_a_secret_file_others_may_read_or_of_another_size_is_refused_naming_it(config):
    auth.load_secret()
    config.chmod(0o644)
    with pytest.raises(NanodataError, match=rf"^cache secret {config}: mode 0644 lets others read it") as info:
        auth.load_secret()
    assert "\n" not in str(info.value)
    config.chmod(0o600)
    config.write_bytes(b"x" * 31)
    with pytest.raises(NanodataError, match=rf"^cache secret {config}: 31 bytes, expected 32"):
        auth.load_secret()


def _load(xdg: str, queue) -> None:
    os.environ.pop(auth.SECRET_ENV, None)
    os.environ["XDG_CONFIG_HOME"] = xdg
    queue.put(auth.load_secret().key)


def test_processes_racing_to_make_the_file_all_use_the_one_made(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_load, args=(str(tmp_path / "config"), queue)) for _ in range(4)]
    for p in procs:
        p.start()
    keys = {queue.get(timeout=60) for _ in procs}
    for p in procs:
        p.join()
    assert len(keys) == 1
    assert [p.name for p in (tmp_path / "config" / "nanodata").iterdir()] == ["cache_secret"]  # no temp file left


def test_a_sealed_file_is_taken_only_where_it_was_put_as_written_under_the_same_secret(tmp_path):
    secret, other = auth.load_secret("secret number one, long enough"), auth.load_secret("secret number two, long")
    local = tmp_path / "made.bin"
    local.write_bytes(b"units " * 1000)
    staged = str(tmp_path / "stage" / "units" / "00000.sqlite")
    os.makedirs(os.path.dirname(staged))
    auth.seal_file(local, staged, secret)
    assert auth.checked_file(staged, tmp_path / "copy", secret) == tmp_path / "stage" / "units" / "00000.sqlite"
    assert auth.checked_file(staged, tmp_path / "copy", other) is None  # another secret
    moved = str(tmp_path / "stage" / "units" / "00001.sqlite")  # copied, seal and all, under another name
    shutil.copy(staged, moved)
    shutil.copy(staged + ".mac", moved + ".mac")
    assert auth.checked_file(moved, tmp_path / "copy", secret) is None
    data = bytearray(open(staged, "rb").read())
    data[10] ^= 1
    open(staged, "wb").write(bytes(data))  # edited
    assert auth.checked_file(staged, tmp_path / "copy", secret) is None
    os.unlink(staged + ".mac")
    assert auth.checked_file(staged, tmp_path / "copy", secret) is None  # no seal
    assert auth.checked_file(str(tmp_path / "none"), tmp_path / "copy", secret) is None  # nothing there


def test_a_sealed_object_in_a_bucket_is_checked_after_its_download(tmp_path, gcs_bucket):
    secret = auth.load_secret("secret number one, long enough")
    local = tmp_path / "made.bin"
    local.write_bytes(b"index " * 1000)
    uri = f"gs://{gcs_bucket}/stage/index/index.sqlite"
    auth.seal_file(local, uri, secret)
    got = auth.checked_file(uri, tmp_path / "down.bin", secret)
    assert got == tmp_path / "down.bin" and got.read_bytes() == local.read_bytes()
    from nanodata import storage

    storage.write_bytes(uri, b"index " * 999 + b"INDEX ")
    assert auth.checked_file(uri, tmp_path / "down2.bin", secret) is None
    storage.delete_files([uri])
    assert auth.checked_file(uri, tmp_path / "down3.bin", secret) is None  # gone from under its seal

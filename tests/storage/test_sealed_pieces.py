"""A staged file sealed in pieces (nanodata.storage.auth): a reader of a range checks the pieces it reads, as they
stream, and hands on nothing of a piece that does not match past its last byte; one piece edited fails only the
reads that cover it; the seal binds the file's place and the pieces' bounds; in a bucket as on disk."""

import os

import pytest

from nanodata import storage
from nanodata.storage import auth

SECRET = auth.load_secret("the pieces test's secret, long enough")
PIECES = [b"alpha\n" * 40, b"", b"bravo\n" * 7, b"charlie\n" * 300]  # an empty piece too (an empty bucket)


def _write(uri: str, tmp) -> list[int]:
    """PIECES written through sealed_output, cut between pieces; their bounds."""
    with auth.sealed_output(uri, SECRET, tmp) as out:
        bounds = [0]
        for k, piece in enumerate(PIECES):
            if k:
                out.cut()
            out.write(piece)
            bounds.append(out.tell())
    return bounds


@pytest.fixture(params=["local", "gcs"])
def where(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "stage" / "scatter" / "00000.bin")
    bucket = request.getfixturevalue("gcs_bucket")
    return f"gs://{bucket}/stage/scatter/00000.bin"


def test_each_range_of_pieces_reads_back_as_written(where, tmp_path):
    bounds = _write(where, tmp_path)
    found = auth.sealed(where, SECRET)
    assert list(found.bounds) == bounds and found.size == len(b"".join(PIECES))
    for k in range(len(PIECES)):
        with found.open(bounds[k], bounds[k + 1]) as f:
            assert f.read() == PIECES[k]
    with found.open(bounds[1], bounds[3]) as f:
        assert list(f) == (PIECES[1] + PIECES[2]).splitlines(keepends=True)
    assert found.read(3, bounds[3] + 5) == b"".join(PIECES)[3:bounds[3] + 5]  # any range: its pieces checked
    assert found.local(tmp_path / "copy").read_bytes() == b"".join(PIECES)
    with pytest.raises(ValueError, match="not whole pieces"):
        found.open(1, bounds[1]).__enter__()


def test_an_edited_piece_fails_the_reads_that_cover_it_and_no_other(where, tmp_path):
    bounds = _write(where, tmp_path)
    data = bytearray(b"".join(PIECES))
    data[bounds[3] + 10:bounds[3] + 16] = b"system"  # injected into the last piece, its size kept
    storage.write_bytes(where, bytes(data))
    found = auth.sealed(where, SECRET)
    with found.open(bounds[0], bounds[3]) as f:
        assert f.read() == b"".join(PIECES[:3])
    handed = bytearray()
    with pytest.raises(auth.BrokenSeal, match=r"00000\.bin: its seal does not hold"), \
            found.open(bounds[3], bounds[4]) as f:
        while block := f.read1(1000):
            handed += block
    assert len(handed) < len(PIECES[3])  # the piece's last bytes were never handed on
    with pytest.raises(auth.BrokenSeal):
        found.local(tmp_path / "copy")


def test_the_seal_binds_the_place_the_bounds_and_the_secret(tmp_path):
    uri = str(tmp_path / "stage" / "scatter" / "00000.bin")
    _write(uri, tmp_path)
    moved = str(tmp_path / "stage" / "scatter" / "00001.bin")
    for suffix in ("", auth.MAC_SUFFIX):
        os.link(uri + suffix, moved + suffix)
    with pytest.raises(auth.BrokenSeal, match="00001.bin: its seal does not hold"):
        auth.sealed(moved, SECRET)
    with pytest.raises(auth.BrokenSeal, match="does not hold"):
        auth.sealed(uri, auth.load_secret("another secret, long enough"))
    seal = bytearray(open(uri + auth.MAC_SUFFIX, "rb").read())
    seal[auth.SEAL_HEAD + 8] ^= 1  # the first piece's end moved
    open(uri + auth.MAC_SUFFIX, "wb").write(bytes(seal))
    with pytest.raises(auth.BrokenSeal, match="does not hold"):
        auth.sealed(uri, SECRET)


def test_missing_and_unsealed_files(tmp_path):
    uri = str(tmp_path / "plan.json")
    assert auth.sealed(uri, SECRET) is None and auth.read_sealed_json(uri, SECRET) is None  # not written yet
    with pytest.raises(auth.BrokenSeal, match=r"plan\.json: missing$"):
        auth.sealed(uri, SECRET, required=True)
    storage.write_json(uri, {"partitions": 3})
    with pytest.raises(auth.BrokenSeal, match="its seal is missing"):
        auth.read_sealed_json(uri, SECRET)
    auth.seal_json(uri, {"partitions": 3}, SECRET)
    assert auth.read_sealed_json(uri, SECRET) == {"partitions": 3}
    os.unlink(uri)  # gone from under its seal: absent to a reader that can do without it, else an error
    assert auth.read_sealed_json(uri, SECRET) is None
    with pytest.raises(auth.BrokenSeal, match="missing"):
        auth.read_sealed_json(uri, SECRET, required=True)

"""nanodata.testing.emulator.GcsEmulator: a real emulator process, restartable with its data kept."""

import os

import requests
from google.cloud import storage as gcs

from nanodata.testing.emulator import GcsEmulator


def test_session_fixture_points_clients_at_the_emulator(gcs_emulator, gcs_bucket):
    assert os.environ["STORAGE_EMULATOR_HOST"] == gcs_emulator.host
    assert gcs_emulator.host.startswith("http://127.0.0.1:")
    gcs.Client().bucket(gcs_bucket).blob("x").upload_from_string(b"hello")
    listed = requests.get(f"{gcs_emulator.host}/storage/v1/b/{gcs_bucket}/o", timeout=5).json()["items"]
    assert [o["name"] for o in listed] == ["x"]


def test_buckets_are_fresh_per_test(gcs_bucket):
    assert list(gcs.Client().list_blobs(gcs_bucket)) == []


def test_stop_start_keeps_port_and_data(tmp_path):
    with GcsEmulator(root=tmp_path) as emu:
        emu.create_bucket("keep")
        emu.create_bucket("keep")  # idempotent
        up = requests.post(f"{emu.host}/upload/storage/v1/b/keep/o", params={"uploadType": "media", "name": "a"},
                           data=b"payload", timeout=5)
        assert up.ok
        host = emu.host
        emu.stop()
        assert not emu.running
        try:
            requests.get(host + "/", timeout=1)
            raise AssertionError("a stopped emulator still answers")
        except requests.ConnectionError:
            pass
        emu.start()
        assert emu.host == host and emu.running
        got = requests.get(f"{emu.host}/download/storage/v1/b/keep/o/a", params={"alt": "media"}, timeout=5)
        assert got.content == b"payload"
    assert not emu.running


def test_runs_as_a_separate_process(tmp_path):
    import sys

    with GcsEmulator(root=tmp_path) as emu:
        assert emu._proc.pid != os.getpid()
    assert "gcp_storage_emulator" not in sys.modules


def test_two_emulators_bind_their_own_free_ports(tmp_path):
    with GcsEmulator(root=tmp_path / "a") as a, GcsEmulator(root=tmp_path / "b") as b:
        assert a.port != b.port and a.port > 0 and b.port > 0
        a.create_bucket("only-in-a")
        def buckets(emu):
            return [x["name"] for x in requests.get(f"{emu.host}/storage/v1/b", timeout=5).json().get("items", [])]

        assert buckets(a) == ["only-in-a"] and buckets(b) == []

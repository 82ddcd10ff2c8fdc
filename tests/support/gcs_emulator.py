"""GCS emulator fixtures (nanodata.testing.emulator), registered by tests/conftest.py for every test.

`gcs_emulator` (session): a real gcp-storage-emulator process on a free loopback port, with
STORAGE_EMULATOR_HOST pointing at it for the whole session, so google-cloud-storage clients
created anywhere (nanodata.storage, DAG tasks) talk to it over HTTP.
`gcs_bucket`: a fresh, uniquely named bucket of the session emulator for one test.
`own_gcs_emulator`: a private emulator for one test, which the test may stop, kill and start again
(outages) without disturbing the session one; the environment points at it for that test.
`emulator_env(emulator)`: the environment a client of an emulator needs, for a child process or a script.
"""

import uuid

import pytest

from nanodata.testing.emulator import GcsEmulator

PROJECT = "nanodata-test"


def emulator_env(emulator: GcsEmulator) -> dict[str, str]:
    return {"STORAGE_EMULATOR_HOST": emulator.host, "GOOGLE_CLOUD_PROJECT": PROJECT}


@pytest.fixture(scope="session")
def gcs_emulator():
    with GcsEmulator() as emulator, pytest.MonkeyPatch.context() as mp:
        for name, value in emulator_env(emulator).items():
            mp.setenv(name, value)
        yield emulator


@pytest.fixture
def gcs_bucket(gcs_emulator) -> str:
    return gcs_emulator.create_bucket(f"test-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def own_gcs_emulator(tmp_path, monkeypatch):
    with GcsEmulator(root=tmp_path / "own-gcs") as emulator:
        for name, value in emulator_env(emulator).items():
            monkeypatch.setenv(name, value)
        yield emulator

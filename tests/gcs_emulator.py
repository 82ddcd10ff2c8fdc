"""GCS emulator fixtures (owned by the storage work; see nanodata.testing.emulator).

`gcs_emulator` (session): a real gcp-storage-emulator process on a free loopback port, with
STORAGE_EMULATOR_HOST pointing at it for the whole session, so google-cloud-storage clients
created anywhere (nanodata.storage, DAG tasks) talk to it over HTTP.
`gcs_bucket`: a fresh, uniquely named bucket for one test.
"""

import uuid

import pytest

from nanodata.testing.emulator import GcsEmulator


@pytest.fixture(scope="session")
def gcs_emulator():
    with GcsEmulator() as emulator, pytest.MonkeyPatch.context() as mp:
        mp.setenv("STORAGE_EMULATOR_HOST", emulator.host)
        mp.setenv("GOOGLE_CLOUD_PROJECT", "nanodata-test")
        yield emulator


@pytest.fixture
def gcs_bucket(gcs_emulator) -> str:
    return gcs_emulator.create_bucket(f"test-{uuid.uuid4().hex[:12]}")

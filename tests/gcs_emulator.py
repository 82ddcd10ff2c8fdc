"""GCS emulator fixture (owned by the storage work; see nanodata.storage)."""

"""Tools for tests, benchmarks and demos, never imported by the library: a real GCS emulator process."""

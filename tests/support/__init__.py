"""What the test areas share: a free port, the fault-injecting HTTP server, the GCS emulator fixtures."""

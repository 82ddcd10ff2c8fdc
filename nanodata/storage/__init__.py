"""Storage: one way to reach local paths and gs://bucket/prefix, to write files whole, to digest and to retry.

The lowest layer above nanodata.errors: it knows paths, bytes, objects and checksums, nothing about parquet or
corpora, and importing it loads neither pyarrow nor torch (tests/storage/test_storage_leaf.py).

- `uri`: the URI layer every step uses (read, write, stream, list, check); re-exported here, so
  `from nanodata import storage; storage.read_bytes(uri)` works for a local path and a gs:// URI alike.
- `files`: local writes that are whole or absent (temp name, fsync, rename, fsync dir) and streamed digests.
- `retry`: the one retry policy for GCS and HTTP.
- `gcs`: the GCS client, bucket rules, listings and `Bucket`, the one reader of objects (pinned, ranged);
  `sides`: the local and bucket ends of a transfer.
"""

from nanodata.storage.gcs import gcs_client, iter_blobs, parse_gs, valid_bucket_name
from nanodata.storage.uri import (
                                  check_uri,
                                  compression_of,
                                  content_digest,
                                  decompression_errors,
                                  delete_files,
                                  delete_tree,
                                  exists,
                                  is_gcs,
                                  iter_sizes,
                                  join_uri,
                                  list_names,
                                  local_copy,
                                  open_decompressed,
                                  open_read,
                                  open_seekable,
                                  open_window,
                                  read_bytes,
                                  read_json,
                                  read_jsons,
                                  write_bytes,
                                  write_file,
                                  write_json,
)

__all__ = ["check_uri", "compression_of", "content_digest", "decompression_errors", "delete_files", "delete_tree", "exists",
           "gcs_client", "is_gcs", "iter_blobs", "iter_sizes", "join_uri", "list_names", "local_copy", "open_decompressed",
           "open_read", "open_seekable", "open_window", "parse_gs", "read_bytes", "read_json", "read_jsons", "valid_bucket_name",
           "write_bytes", "write_file", "write_json"]

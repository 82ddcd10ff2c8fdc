"""Storage: one way to reach local paths and gs://bucket/prefix, to write files whole, to digest and to retry.

- `uri`: the URI layer every step uses (read, write, stream, list, check); re-exported here, so
  `from nanodata import storage; storage.read_bytes(uri)` works for a local path and a gs:// URI alike.
- `dirsync`: copy a whole directory between local disk and a bucket (`nanodata sync`), ordered and verified.
- `files`: local writes that are whole or absent (temp name, fsync, rename, fsync dir) and streamed digests.
- `retry`: the one retry policy for GCS and HTTP.
- `gcs`, `sides`: the GCS client and bucket rules; the local and bucket ends of a transfer.
"""

from nanodata.storage.dirsync import fetch_dir, put_dir, sync
from nanodata.storage.gcs import gcs_client, iter_blobs, parse_gs, valid_bucket_name
from nanodata.storage.uri import (check_uri, compression_of, content_digest, decompression_errors, delete_tree,
                                  exists, is_gcs, join_uri, list_names, local_copy, open_decompressed, open_read,
                                  open_seekable, read_bytes, read_json, write_bytes, write_file, write_json)

__all__ = ["check_uri", "compression_of", "content_digest", "decompression_errors", "delete_tree", "exists",
           "fetch_dir", "gcs_client", "is_gcs", "iter_blobs", "join_uri", "list_names", "local_copy",
           "open_decompressed", "open_read", "open_seekable", "parse_gs", "put_dir", "read_bytes", "read_json", "sync",
           "valid_bucket_name", "write_bytes", "write_file", "write_json"]

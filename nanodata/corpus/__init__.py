"""A built corpus: its layout (`layout`: file names, manifest, commit markers, latest.json, the train/val rule) and
its copy between local disk and a bucket (`sync`: `nanodata sync`, ordered and verified).

Above storage (which moves bytes and knows nothing of corpora), below everything that reads or writes a corpus.
"""

from nanodata.corpus.dirsync import fetch_dir, put_dir, sync

__all__ = ["fetch_dir", "put_dir", "sync"]

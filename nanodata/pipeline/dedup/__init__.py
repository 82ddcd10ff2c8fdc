"""Duplicates out of a corpus: `exact` (a doc whose text was written before) and `near` (a file whose MinHash
signature, `minhash`, says it is a near-copy of a kept file), one rule each for the CLI and the DAG."""

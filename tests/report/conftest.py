"""The report tests' fixtures."""

from built_corpus import built  # noqa: F401  (a fixture: a built corpus with its lengths per shard)

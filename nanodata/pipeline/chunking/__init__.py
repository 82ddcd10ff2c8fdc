"""C++ chunking with tree-sitter: sources -> units -> dependency graphs -> modes -> token-exact docs.

`chunk_to_jsonl(output, inputs=..., project_dirs=..., mode=...)` is the library entry point
(Airflow tasks call it directly), `chunk_to_parquet(out_dir, ...)` the same docs as parquet shards;
`nanodata chunk` is their command-line face.

The modules, by role:
- the algorithm (a file in, its units and docs out; no I/O): `units` (the data model), `syntax`, `treewalk`,
  `bracefallback`, `lines`, `references`, `parse`, `braces`, `fidelity`, `pack`, `modes`, `graphs`, and
  `clangindex` (references bound by libclang);
- the build around it (inputs, workers, the cache, the index, outputs): `sources`, `partitions`, `pipeline`,
  `globalindex`, `reuse`, `stored`, `writer`, `config`, `cli`.
"""

from nanodata.pipeline.chunking.pipeline import chunk_to_jsonl, chunk_to_parquet
from nanodata.settings import CPP_EXTENSIONS, MODES

__all__ = ["chunk_to_jsonl", "chunk_to_parquet", "MODES", "CPP_EXTENSIONS"]

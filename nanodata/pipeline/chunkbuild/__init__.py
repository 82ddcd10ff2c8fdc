"""The build around the C++ chunker (nanodata.pipeline.chunking): inputs in, a corpus of docs out.

`chunk_to_jsonl(output, inputs=..., project_dirs=..., mode=...)` is the library entry point (Airflow tasks call its
steps directly), `chunk_to_parquet(out_dir, ...)` the same docs as parquet shards; `nanodata chunk` is their
command-line face.

The modules: `config` (ChunkConfig: the settings plus what a run builds from them), `sources` (JSONL records and
project trees -> files), `partitions` (inputs cut into partitions for mapped tasks), `pipeline` (workers, the file
pass, the merge), `stage` (where a build's stages keep their files), `graph` (the build's stages, each one's work
written once), `executor` (the CLI's run of the graph), `reuse` and `stored` (the per-file cache and what it stores), `globalindex` (the
global modes' unit stores and name index), `clangindex` (references bound by libclang, by USR) and `clangpass`
(the clang resolver in the file pass), `writer` (docs to JSONL), `cli`. Everything a file becomes is decided by the algorithm in nanodata.pipeline.chunking; nothing there
imports from here.
"""

from nanodata.pipeline.chunkbuild.executor import chunk_to_jsonl, chunk_to_parquet

__all__ = ["chunk_to_jsonl", "chunk_to_parquet"]

"""The C++ chunker, the algorithm: a file in, its units and token-exact docs out; no I/O, no workers, no cache.

source text -> `syntax` (tree-sitter) -> `treewalk` / `bracefallback` (units: the data model in `units`; `braces`,
`lines`) -> `references` and `parse` (what a file defines and uses) -> `graphs` (dependency order) -> `modes` (which
units make a doc) -> `pack` (token-exact docs cut at statement boundaries) -> `fidelity` (lines kept as written,
balance). The build that runs it over a corpus (inputs, workers, the cache, the index, outputs, the CLI) is
nanodata.pipeline.chunkbuild.
"""

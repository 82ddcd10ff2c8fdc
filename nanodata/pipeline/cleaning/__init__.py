"""What a file must pass before it is chunked (StarCoder2's and BigCode's cleaning of a code corpus).

`stages` is the slot (filters, then transforms, held by ChunkConfig.cleaning); `filters` the rules that drop a
file (generated, long-lines, alpha, encoded, and the always-on empty, binary, undecodable); `redact` the secrets,
emails and IP addresses replaced by placeholders; `decontaminate` the benchmark items a file must not hold;
`licenses` each project's SPDX id; `tally` what a run dropped and redacted, for its summary and report.
"""

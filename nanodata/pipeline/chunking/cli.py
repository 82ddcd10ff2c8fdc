"""`nanodata chunk`: C++ sources -> JSONL training docs of at most --max-tokens tokens."""

from __future__ import annotations

import argparse

from nanodata.corpus.layout import CHUNK_SUMMARY
from nanodata.errors import NanodataError
from nanodata.pipeline.chunking.modes import MODES
from nanodata.pipeline.chunking.sources import CPP_EXTENSIONS
from nanodata.pipeline.to_parquet import add_shard_flags
from nanodata.ranges import (
    CACHE_GRACE_HOURS,
    CACHE_KEEP,
    CROSS_DEPTH,
    MAX_FILE_BYTES,
    MAX_TOKENS,
    MIN_TOKENS,
    NEAR_THRESHOLD,
    PARTITION_MB,
    PROCESS_WORKERS,
    ROWS_PER_FILE,
    SEED,
    VAL_FRACTION,
    flag,
    local_path,
)

OUTPUT_HINT = "chunk to a local file, then upload it and OUTPUT.done, e.g. their folder with `nanodata sync`"
MODE_HELP = """modes:
  basic       a file that fits is one doc; otherwise preamble (includes, macros, using, typedefs,
              forward declarations) + runs of whole types/functions; namespaces re-wrapped
  dep-aware   like basic, functions ordered callees-first (call levels; cycles after, in source order)
  cross-file  each function also carries the functions it calls in other files (unique names only,
              breadth-first up to --cross-depth)
  project     cross-file over --project-dirs; projects ordered by their #include dependencies
  compilable  per function: preamble, needed types in dependency order, callees first; falls back to
              dropping cross-file functions, then preamble + named types + the function
every doc is <= --max-tokens counted with the real tokenizer; every source line, as written, reaches the
docs; a unit larger than that is cut along its syntax tree into docs of kind "split" (each with its opening
and closing lines), only a single statement larger than the budget at line boundaries. Output lines:
{"text","n_tokens","mode","source","lines","kind"}; OUTPUT.done (the summary as JSON) is written last. With
--parquet-dir the docs go straight into parquet shards (to-parquet's split, shuffle and manifest;
--rows-per-file, --val-fraction and --seed apply only there)."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = MODE_HELP
    parser.add_argument("--inputs", nargs="+", default=[], metavar="JSONL",
                        help='JSONL files, one {"text": ...} per line (path/repo keys name the source); '
                             ".jsonl, .jsonl.gz or .jsonl.zst, local or gs://bucket/object, streamed")
    parser.add_argument("--project-dirs", nargs="+", default=[], metavar="DIR",
                        help="C++ trees (local or gs:// prefixes): each sub-directory is a project, files directly "
                             "in DIR form a project named after DIR (so a plain folder of C++ files just works)")
    out = parser.add_mutually_exclusive_group(required=True)
    out.add_argument("--output", type=local_path("file", OUTPUT_HINT),
                     help="output JSONL, a local file (written to OUTPUT.tmp, then renamed)")
    out.add_argument("--parquet-dir", metavar="DIR", type=local_path(),
                     help="write parquet shards to DIR (new or empty) instead of JSONL, as `nanodata to-parquet` "
                          "would from OUTPUT with the same --rows-per-file, --val-fraction and --seed; the summary "
                          f"is DIR/{CHUNK_SUMMARY}")
    add_shard_flags(parser)
    parser.add_argument("--mode", choices=MODES, default="basic", help="chunking mode (default: basic)")
    parser.add_argument("--max-tokens", type=flag(MAX_TOKENS), default=MAX_TOKENS.default,
                        help=f"token budget per doc, >= {MIN_TOKENS} (default: {MAX_TOKENS.default})")
    parser.add_argument("--tokenizer", default="cl100k_base",
                        help="tiktoken name or a `nanodata tokenizer train` directory (default: cl100k_base)")
    parser.add_argument("--cross-depth", type=flag(CROSS_DEPTH), default=CROSS_DEPTH.default,
                        help=f"breadth-first depth of cross-file dependencies (default: {CROSS_DEPTH.default})")
    parser.add_argument("--max-file-bytes", type=flag(MAX_FILE_BYTES), default=None, metavar="N",
                        help="skip files larger than N bytes, each named with its size in the log and in the "
                             "summary (default: no limit; a file is parsed whole, a big one is just more docs)")
    parser.add_argument("--extensions", default=",".join(CPP_EXTENSIONS),
                        help="comma-separated C++ file extensions for --project-dirs")
    parser.add_argument("--dedup", choices=("near", "exact"), default="near",
                        help="near (default): a file whose 5-gram shingles have an estimated Jaccard >= "
                             "--near-threshold with a kept file loses its docs (MinHash LSH, every candidate pair "
                             "verified on its full signature; the kept copy of a cluster is the first in input order, "
                             "a copy under third_party/, vendor/, 3rdparty/, contrib/, ... losing to one that is not), "
                             "then exact duplicate docs are dropped; exact: only exact duplicate docs")
    parser.add_argument("--near-threshold", type=flag(NEAR_THRESHOLD), default=NEAR_THRESHOLD.default, metavar="J",
                        help=f"--dedup near: the Jaccard at which two files are near-copies, from {NEAR_THRESHOLD.lo:g} "
                             f"to {NEAR_THRESHOLD.hi:g} (default: {NEAR_THRESHOLD.default:g}, BigCode's)")
    parser.add_argument("--filters", default="generated,long-lines,alpha,encoded", metavar="LIST",
                        help="files dropped before chunking (StarCoder2's rules), each named in the summary with the "
                             "figure that decided it: generated (an auto-generated notice in the first lines, or a "
                             "generator's header: protoc, moc, flex, bison, SWIG, ...), long-lines (a line over 1,000 "
                             "characters or a mean over 100), alpha (under 25%% alphabetic), encoded (base64, hex or "
                             "\\uXXXX data over 1,024 characters or half the file); default: all four; none: off")
    parser.add_argument("--redact", default="secrets,emails,ips", metavar="LIST",
                        help="replaced before chunking by <KEY>, <PASSWORD>, <EMAIL>, <IP_ADDRESS> (BigCode's "
                             "placeholders; the summary counts them by kind, never shows them): secrets (cloud keys, "
                             "private key blocks, tokens, password literals), emails, ips (private, loopback and "
                             "documentation ranges kept); default: all three; none: off")
    parser.add_argument("--decontaminate", nargs="+", default=[], metavar="FILE",
                        help='JSONL files of benchmark items ({"text": ...} per line, local or gs://): a source file '
                             "holding an item's text (whitespace ignored) loses its docs; the summary counts them by "
                             "item (see README for building one from HumanEval-X / MultiPL-E)")
    parser.add_argument("--licenses", default=None, metavar="LIST",
                        help="keep only projects whose license (an SPDX id found in its LICENSE/COPYING files, or a "
                             "JSONL record's \"license\") is listed, e.g. MIT,Apache-2.0,BSD-3-Clause (default: all; "
                             "every project's license is in the summary)")
    parser.add_argument("--workers", type=flag(PROCESS_WORKERS), default=PROCESS_WORKERS.default,
                        help="processes; output is identical for any value")
    parser.add_argument("--partition-mb", type=flag(PARTITION_MB), default=PARTITION_MB.default,
                        help="global modes and --dedup near: parse/emit in partitions of this many MB of source, staged on disk "
                             "next to OUTPUT, so memory stays bounded; output is identical for any value "
                             f"(default: {PARTITION_MB.default:g})")
    parser.add_argument("--cache", default=None, metavar="DIR",
                        help="keep each file's result (docs, figures, signature, cleaning outcome) in DIR (local or "
                             "gs://) and reuse it in later runs: only new and changed files are chunked (in the "
                             "global modes, the projects that see a changed file), and the output is byte-identical "
                             "to a run without it; entries are checksummed, a corrupt one is rebuilt")
    parser.add_argument("--no-reuse", action="store_true",
                        help="--cache: chunk every file again (a clean rebuild) and refresh DIR's entries")
    parser.add_argument("--cache-keep-runs", type=flag(CACHE_KEEP), default=CACHE_KEEP.default, metavar="N",
                        help="--cache: after a run, delete the entries none of the last N runs used (N >= 1: this "
                             f"run's are kept; default: {CACHE_KEEP.default})")
    parser.add_argument("--cache-grace-hours", type=flag(CACHE_GRACE_HOURS), default=CACHE_GRACE_HOURS.default,
                        metavar="H",
                        help="--cache: that cleanup never deletes an entry younger than H hours: it may be one a run "
                             "still going wrote (runs sharing DIR each clean up at their end), so H should exceed "
                             "your longest run; 0 only when one run at a time uses DIR "
                             f"(default: {CACHE_GRACE_HOURS.default:g})")
    parser.add_argument("--append", action="store_true",
                        help="append whole lines to OUTPUT (for a parquet writer tailing it) instead of replacing it")
    parser.add_argument("--strict", action="store_true", help="stop at the first bad input (exit 2)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def check_outputs(args: argparse.Namespace) -> None:
    """Flags that belong to the other output (--append to JSONL, the shard flags to --parquet-dir): one line."""
    if args.parquet_dir and args.append:
        raise NanodataError("--append: appends to an --output JSONL; --parquet-dir writes a new corpus")
    shard_flags = {"--rows-per-file": (args.rows_per_file, ROWS_PER_FILE), "--val-fraction": (args.val_fraction,
                   VAL_FRACTION), "--seed": (args.seed, SEED)}
    for name, (value, allowed) in shard_flags.items():
        if not args.parquet_dir and value != allowed.default:
            raise NanodataError(f"{name} {value}: applies to --parquet-dir (for a JSONL --output use it with "
                                "`nanodata to-parquet`)")


def run(args: argparse.Namespace) -> int:
    from nanodata.pipeline.chunking.config import ChunkConfig
    from nanodata.pipeline.chunking.pipeline import chunk_to_jsonl, chunk_to_parquet

    check_outputs(args)
    extensions = tuple(e if e.startswith(".") else "." + e for e in args.extensions.split(",") if e)
    config = ChunkConfig(mode=args.mode, max_tokens=args.max_tokens, tokenizer=args.tokenizer,
                         cross_depth=args.cross_depth, max_file_bytes=args.max_file_bytes, workers=args.workers,
                         partition_mb=args.partition_mb, extensions=extensions, dedup=args.dedup,
                         near_threshold=args.near_threshold, filters=args.filters, redact=args.redact,
                         decontaminate=tuple(args.decontaminate), licenses=args.licenses, cache=args.cache,
                         reuse=not args.no_reuse, cache_keep_runs=args.cache_keep_runs,
                         cache_grace_hours=args.cache_grace_hours)
    common = {"inputs": args.inputs, "project_dirs": args.project_dirs, "config": config, "strict": args.strict,
              "progress": not args.no_progress}
    if args.parquet_dir:
        s = chunk_to_parquet(args.parquet_dir, rows_per_file=args.rows_per_file, val_fraction=args.val_fraction,
                             seed=args.seed, **common)
    else:
        s = chunk_to_jsonl(args.output, append=args.append, **common)
    print(f"chunk {s['mode']}: {s['files_read']} files read, {s['files_skipped']} skipped, "
          f"{s['files_failed']} failed, {s['syntax_errors']} with syntax errors | {s['docs']} docs, "
          f"{s['tokens']} tokens, {s['docs_split']} split, {s['duplicates_dropped']} duplicates dropped | "
          f"{s['files_per_s']} files/s, {s['mb_per_s']} MB/s -> {s['output']}")
    total, by_project = s["fidelity"]["total"], s["fidelity"]["by_project"]
    worst = sorted(by_project.items(), key=lambda item: (item[1]["lines_kept_pct"], item[1]["balanced_docs_pct"]))[:5]
    print(f"fidelity: {total['lines_kept_pct']}% of {total['lines']} lines kept, {total['balanced_docs_pct']}% of docs "
          f"balanced, {total['oversized_statement_cuts']} oversized statements cut ({total['cut_docs']} docs), "
          f"{total['parse_error_regions']} parse-error regions | per project (see OUTPUT.done for all): "
          + ", ".join(f"{p} {t['lines_kept_pct']}% kept {t['balanced_docs_pct']}% balanced" for p, t in worst))
    if total["type_cycles"]:
        print(f"type order: {total['type_cycles']} types placed before a base or primary template (a cycle of them), "
              f"e.g. {'; '.join(total['type_cycle_examples'][:3])}")
    if s["near_duplicates"] is not None:
        near = s["near_duplicates"]
        print(f"near-duplicates (Jaccard >= {near['threshold']:g}): {near['files_removed']} of {near['files_signed']} "
              f"files removed ({near['bytes_removed']} bytes, {near['docs_removed']} docs) in {near['clusters']} "
              f"clusters; examples in 'near_duplicates' of the summary")
    cleaning = s["cleaning"]
    if cleaning["files_dropped"] or cleaning["redactions"]:
        where = f"{s['output']}/{CHUNK_SUMMARY}" if args.parquet_dir else f"{s['output']}.done"
        dropped = ", ".join(f"{reason} {d['files']:,}" for reason, d in cleaning["dropped"].items()) or "none"
        redacted = ", ".join(f"{kind} {n:,}" for kind, n in cleaning["redactions"].items()) or "none"
        print(f"cleaning: {cleaning['files_dropped']:,} files dropped ({dropped}); redacted: {redacted} (each "
              f"dropped file named with its reason in 'cleaning' of {where})")
    if s["reuse"] is not None:
        r = s["reuse"]
        print(f"reuse (--cache {args.cache}): {r['files_reused']:,} files reused ({r['bytes_reused']:,} bytes), "
              f"{r['files_chunked']:,} chunked ({r['bytes_chunked']:,} bytes), {r['entries_rebuilt']:,} corrupt entries "
              f"rebuilt; cache: {r['cache']['entries']:,} entries, {r['cache']['bytes']:,} bytes")
    if s["files_too_big"]:  # each is also logged; OUTPUT.done lists them with their sizes
        where = f"{s['output']}/{CHUNK_SUMMARY}" if args.parquet_dir else f"{s['output']}.done"
        print(f"{s['files_too_big']} files over --max-file-bytes {s['max_file_bytes']} skipped (see 'too_big' in "
              f"{where})")
    if s.get("ambiguous_by_project"):  # global modes: names no lookup resolves (see OUTPUT.done for all)
        top = ", ".join(f"{p} {n}" for p, n in list(s["ambiguous_by_project"].items())[:5])
        print(f"names defined twice with one qualification within a project (never pulled): "
              f"{s['ambiguous_names']} ({top}{', ...' if len(s['ambiguous_by_project']) > 5 else ''})")
    return 0

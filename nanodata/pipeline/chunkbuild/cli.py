"""`nanodata chunk`: C++ sources -> JSONL training docs of at most --max-tokens tokens."""

from __future__ import annotations

import argparse

from nanodata.corpus.layout import CHUNK_SUMMARY
from nanodata.errors import NanodataError
from nanodata.pipeline.to_parquet import add_shard_flags
from nanodata.ranges import ROWS_PER_FILE, SEED, VAL_FRACTION, local_path
from nanodata.settings import add_flags, from_flags

OUTPUT_HINT = "chunk to a local file, then upload it and OUTPUT.done, e.g. their folder with `nanodata sync`"
MODE_HELP = """modes:
  basic       a file that fits is one doc; otherwise preamble (includes, macros, using, typedefs,
              forward declarations) + runs of whole types/functions; namespaces re-wrapped
  dep-aware   like basic, functions ordered callees-first (call levels; cycles after, in source order)
  cross-file  each function also carries the functions it calls in other files (as --resolver finds them,
              breadth-first up to --cross-depth)
  project     cross-file over --project-dirs; projects ordered by their #include dependencies
  compilable  per function: preamble, needed types in dependency order, callees first; falls back to
              dropping cross-file functions, then preamble + named types + the function
every doc is <= --max-tokens counted with the real tokenizer; every source line, as written, reaches the
docs; a unit larger than that is cut along its syntax tree into docs of kind "split" (each with its opening
and closing lines), only a single statement larger than the budget at line boundaries, and a single line
larger than the budget by characters. Output lines:
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
                     help="output JSONL, a local file (written to OUTPUT.tmp, then renamed; with --append, "
                          "OUTPUT itself)")
    out.add_argument("--parquet-dir", metavar="DIR", type=local_path(),
                     help="write parquet shards to DIR (new or empty) instead of JSONL, as `nanodata to-parquet` "
                          "would from OUTPUT with the same --rows-per-file, --val-fraction and --seed; the summary "
                          f"is DIR/{CHUNK_SUMMARY}")
    add_shard_flags(parser)
    add_flags(parser)
    parser.add_argument("--cache", default=None, metavar="DIR",
                        help="keep each file's result (docs, figures, signature, cleaning outcome) in DIR (local or "
                             "gs://) and reuse it in later runs: only new and changed files are chunked (in the "
                             "global modes, the projects that see a changed file), and the output is byte-identical "
                             "to a run without it; entries are plain data under a keyed MAC: an edited, moved or "
                             "corrupt one is rebuilt")
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
    from nanodata.pipeline.chunkbuild.clangpass import add_resolver
    from nanodata.pipeline.chunkbuild.config import ChunkConfig
    from nanodata.pipeline.chunkbuild.executor import chunk_to_jsonl, chunk_to_parquet

    check_outputs(args)
    config = ChunkConfig(**from_flags(args, cache=args.cache))
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
    where = f"{s['output']}/{CHUNK_SUMMARY}" if args.parquet_dir else f"{s['output']}.done"
    if s["near_duplicates"] is not None:
        near = s["near_duplicates"]
        print(f"near-duplicates (Jaccard >= {near['threshold']:g}): {near['files_removed']} of {near['files_signed']} "
              f"files removed ({near['bytes_removed']} bytes, {near['docs_removed']} docs) in {near['clusters']} "
              f"clusters; examples in 'near_duplicates' of the summary")
    cleaning = s["cleaning"]
    if cleaning["files_dropped"] or cleaning["redactions"]:
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
        print(f"{s['files_too_big']} files over --max-file-bytes {s['max_file_bytes']} skipped (see 'too_big' in "
              f"{where})")
    if s.get("ambiguous_by_project"):  # global modes: names no lookup resolves (see OUTPUT.done for all)
        top = ", ".join(f"{p} {n}" for p, n in list(s["ambiguous_by_project"].items())[:5])
        print(f"names defined twice with one qualification within a project (never pulled by names"
              f"{'; clang binds each use of them' if s.get('clang') is not None else ''}): "
              f"{s['ambiguous_names']} ({top}{', ...' if len(s['ambiguous_by_project']) > 5 else ''})")
    if s.get("clang") is not None:  # --resolver clang: summed over projects (per project in OUTPUT.done)
        summed: dict = {}
        for figures in s["clang"].values():
            add_resolver(summed, "all", figures)
        total = summed.get("all", {})
        reasons = ", ".join(f"{k[7:]} {n}" for k, n in sorted(total.items()) if k.startswith("names: ")) or "none"
        missing = sorted(((n, k[9:]) for k, n in total.items() if k.startswith("missing: ")), key=lambda m: (-m[0], m[1]))
        if missing:
            reasons += "; headers missing most often: " + ", ".join(f"{h} {n}" for n, h in missing[:3])
        print(f"clang resolver: {total.get('files_clang', 0)} files by clang ({total.get('files_clang_with_errors', 0)} "
              f"of them parsed with errors), {total.get('files_names', 0)} by names "
              f"({reasons}); {total.get('references_bound', 0):,} references bound, "
              f"{total.get('references_bound_in_tree', 0):,} in the input tree; pulls vs names "
              + (f"(the files emitted in this run): {total['pulls_gained']} gained, {total['pulls_lost']} lost, "
                 f"{total['pulls_changed']} changed" if "pulls_clang" in total
                 else "not counted: every file's docs came from the cache")
              + f" (see 'clang' in {where})")
    return 0

"""`nanodata` command line: one sub-command per pipeline step.

Each step's module owns its arguments: it defines `configure_parser(parser)` and
`run(args) -> int`. Modules are imported only for the command being run, so
`nanodata --help` stays fast and a trainer machine needs no chunking dependencies.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from nanodata.errors import NanodataError

# name -> (module, one-line help)
COMMANDS = {
    "download": ("nanodata.pipeline.download", "download pretraining parquet shards over HTTP (retries, atomic, verified)"),
    "tokenizer": ("nanodata.pipeline.tokenizer_train", "train a BPE tokenizer on a parquet corpus"),
    "pretokenize": ("nanodata.pipeline.pretokenize", "tokenize a parquet corpus into .npy token shards (DataLoaderLite)"),
    "chunk": ("nanodata.pipeline.chunkbuild.cli", "chunk C++ sources at function boundaries into JSONL docs (or parquet shards)"),
    "to-parquet": ("nanodata.pipeline.to_parquet", "convert chunker JSONL into shuffled parquet shards + manifest"),
    "sync": ("nanodata.corpus.dirsync", "copy a corpus between a local dir and gs://bucket/prefix"),
    "report": ("nanodata.report.corpus_report", "write a build report (counts, plots) for a corpus directory"),
}


class OneLineParser(argparse.ArgumentParser):
    """A usage mistake is one line (`nanodata CMD: error: argument --x: ...`) and exit 2, as our own errors:
    argparse's usage block above it would bury the line that names the flag, the value and its range."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = OneLineParser(prog="nanodata", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:  # only the chosen command's module is imported
            importlib.import_module(module_name).configure_parser(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if a in COMMANDS), None)
    try:
        args = build_parser(command).parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed in one line: the same status either way
        return exc.code
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        return module.run(args) or 0
    except NanodataError as exc:
        print(f"nanodata {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"nanodata {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

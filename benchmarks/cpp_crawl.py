"""A crawl of real C++ as one `.jsonl.gz`, with a crawl's mix of duplicates, and a night's changes to it.

Pool: the usable headers under /usr/include (chunk_bench_common.real_cpp_files) and the C++ files of
/work/trees/{leveldb,re2,fmt,tinyxml2,libstdcxx}, each distinct content once (libstdcxx is /usr/include's
libstdc++ again). Records {"text", "path", "repo"}, in a fixed pattern of ten: six distinct, three near-copies,
one exact copy (60/30/10 of the records).
- distinct: a pool file, cycled; from its second pass on (variant v >= 1), every identifier that is not a C++
  keyword or preprocessor word gets the suffix `_v`, so no two distinct records share many 5-gram shingles
  (near-dedup keeps them) while each keeps its real structure (tree-sitter sees the same code).
- near-copy: an earlier distinct record with a few lines (2%, at least one) deleted or doubled and a line of its
  own on top: estimated Jaccard ~0.9 with its original, so near-dedup removes it (a short file can fall under 0.7).
- exact copy: an earlier distinct record, byte for byte.
The night: 1% of the records edited (a comment line inserted at a seeded line) and 0.1% added at the end (new
distinct records: a pool file in a variant no record has).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from chunk_bench_common import MAX_FILE_BYTES, real_cpp_files

TREES = Path("/work/trees")
TREE_NAMES = ("leveldb", "re2", "fmt", "tinyxml2", "libstdcxx")
CPP = (".h", ".hh", ".hpp", ".hxx", ".c", ".cc", ".cpp", ".cxx", ".ipp", ".tcc")
PATTERN = "DDDDDDNNNE"  # per ten records: distinct, near-copy, exact copy
EDITED, ADDED = 0.01, 0.001
NEAR_LINES = 0.02
SEED = 0
KEYWORDS = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
    compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
    default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
    int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
    reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch template
    this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t
    while xor xor_eq override final
    include define undef ifdef ifndef if elif else endif pragma once error warning defined line
""".split())
WORDS = "|".join(sorted(KEYWORDS, key=len, reverse=True))
IDENTIFIER = re.compile(rf"\b(?!(?:{WORDS})\b)([A-Za-z_]\w*)")


def pool() -> list[tuple[str, str, str]]:
    """(repo, path, text) of every usable real C++ file, each content once, in a fixed order."""
    found = [(rel.split("/", 1)[0] if "/" in rel else "libc", rel, text) for rel, text in real_cpp_files()]
    for name in TREE_NAMES:
        for path in sorted((TREES / name).rglob("*")):
            if path.suffix not in CPP or path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            if not data.strip() or len(data) > MAX_FILE_BYTES or b"\0" in data:
                continue
            try:
                found.append((name, str(path.relative_to(TREES / name)), data.decode("utf-8")))
            except UnicodeDecodeError:
                continue
    seen, out = set(), []
    for repo, rel, text in found:
        digest = hashlib.sha256(text.encode()).digest()
        if digest not in seen:
            seen.add(digest)
            out.append((repo, rel, text))
    return out


def variant(text: str, v: int) -> str:
    return text if v == 0 else IDENTIFIER.sub(rf"\g<1>_{v}", text)


def near_copy(text: str, rng: random.Random, n: int) -> str:
    lines = text.splitlines(keepends=True)
    for i in sorted(rng.sample(range(len(lines)), max(1, int(len(lines) * NEAR_LINES))), reverse=True):
        if rng.random() < 0.5:
            del lines[i]
        else:
            lines.insert(i, lines[i])
    return f"// mirrored copy {n}\n" + "".join(lines)


@dataclass
class Crawl:
    path: Path
    records: int = 0
    text_bytes: int = 0
    kinds: dict = field(default_factory=lambda: {"distinct": 0, "near": 0, "exact": 0})
    variants: int = 0  # the distinct records used variants 0 .. variants-1 of each pool file

    @property
    def gz_bytes(self) -> int:
        return self.path.stat().st_size


def _line(repo: str, rel: str, text: str) -> str:
    return json.dumps({"text": text, "path": rel, "repo": repo}, ensure_ascii=False) + "\n"


def _distinct(files: list[tuple[str, str, str]], n: int) -> tuple[str, str, str]:
    """The n-th distinct record: (repo, path, text)."""
    repo, rel, text = files[n % len(files)]
    v = n // len(files)
    return f"{repo}-v{v}", rel, variant(text, v)


def write_crawl(path: Path, megabytes: float, files: list[tuple[str, str, str]]) -> Crawl:
    """Records in PATTERN until their text holds `megabytes` MB (10^6 bytes)."""
    rng = random.Random(SEED)
    crawl = Crawl(path)
    limit = int(megabytes * 1e6)
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as out:
        while crawl.text_bytes < limit:
            kind = PATTERN[crawl.records % len(PATTERN)]
            if kind == "D":
                record = _distinct(files, crawl.kinds["distinct"])
                crawl.variants = crawl.kinds["distinct"] // len(files) + 1
                crawl.kinds["distinct"] += 1
            else:
                # made again rather than kept: the distinct records' text would be most of the crawl in memory
                repo, rel, text = _distinct(files, rng.randrange(crawl.kinds["distinct"]))
                mirror = f"mirror{crawl.records % 97}"
                record = (mirror, rel, near_copy(text, rng, crawl.records)) if kind == "N" else (mirror, rel, text)
                crawl.kinds["near" if kind == "N" else "exact"] += 1
            out.write(_line(*record))
            crawl.records += 1
            crawl.text_bytes += len(record[2].encode("utf-8"))
    return crawl


def night(crawl: Crawl, files: list[tuple[str, str, str]]) -> dict:
    """Edit EDITED of the records (a line inserted), append ADDED new distinct records; rewrites the file."""
    rng = random.Random(SEED + 1)
    edited = set(rng.sample(range(crawl.records), int(crawl.records * EDITED)))
    added = max(1, int(crawl.records * ADDED))
    tmp = crawl.path.with_name(crawl.path.name + ".night")
    with gzip.open(crawl.path, "rt", encoding="utf-8") as src, gzip.open(tmp, "wt", encoding="utf-8",
                                                                         compresslevel=1) as out:
        for number, line in enumerate(src):
            if number in edited:
                record = json.loads(line)
                lines = record["text"].splitlines(keepends=True)
                at = rng.randrange(len(lines) + 1)
                record["text"] = "".join(lines[:at] + [f"// nightly edit of record {number}\n"] + lines[at:])
                line = json.dumps(record, ensure_ascii=False) + "\n"
            out.write(line)
        for k in range(added):
            repo, rel, text = files[rng.randrange(len(files))]
            out.write(_line(f"{repo}-v{crawl.variants + k}", rel, variant(text, crawl.variants + k)))
    os.replace(tmp, crawl.path)
    crawl.records += added
    return {"edited": len(edited), "added": added}

"""What the plain-data codec costs on the chunker's stores, beside the JSON it cannot avoid.

Parses the C++ files of NANODATA_BENCH_TREES (colon-separated folders, e.g. checkouts of google/leveldb and
google/re2; default: this machine's libstdc++ headers, /usr/include/c++) as the parse pass does, then, in CPU seconds (best of --runs):
- the unit stores: stored.UNITS encode + decode of each file's units and stored.BARE_UNIT encode + decode of each
  unit, beside json.dumps + json.loads of the same JSON bodies (the floor: what any JSON codec pays);
- the cache's read path: each file's entry (stored.RESULT of its whole-file doc) put in an EntryStore, then read
  back (EntryStore.get: open, read, MAC check; RESULT.decode), per entry, beside reading the same files' bytes
  alone.
Run it with PYTHONPATH set to each checkout to compare two versions of the codec (the bytes written must match).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from nanodata.pipeline.chunkbuild.stored import BARE_UNIT, RESULT, UNITS, DocLine, Result
from nanodata.pipeline.chunking.pack import counter_for
from nanodata.pipeline.chunking.parse import parse_units
from nanodata.storage.entries import EntryStore
from nanodata.storage.plain import HEADER

TREES = [p for p in os.environ.get("NANODATA_BENCH_TREES", "/usr/include/c++").split(":") if p]
CPP = (".h", ".hh", ".hpp", ".cc", ".cpp", ".cxx", ".tcc")


def best(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def body(payload: bytes) -> bytes:
    return payload[HEADER:HEADER + int.from_bytes(payload[HEADER - 8:HEADER], "little")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    counter = counter_for("cl100k_base")
    texts = [p.read_text(errors="surrogateescape") for tree in TREES for p in sorted(Path(tree).rglob("*"))
             if p.is_file() and p.suffix in CPP]
    files = [parse_units(text, counter.count_batch, split_bytes=8000) for text in texts]
    units = [u for fu in files for u in fu.units]
    stores, bare = [UNITS.encode(fu) for fu in files], [BARE_UNIT.encode(u) for u in units]
    bodies = [json.loads(body(p)) for p in stores + bare]
    digest = hashlib.sha256(b"".join(stores + bare)).hexdigest()[:16]

    def codec():
        for fu in files:
            UNITS.encode(fu)
        for data in stores:
            UNITS.decode(data)
        for unit in units:
            BARE_UNIT.encode(unit)
        for data in bare:
            BARE_UNIT.decode(data)

    def json_alone():
        for value in bodies:
            json.loads(json.dumps(value, ensure_ascii=False, separators=(",", ":")))

    mine, floor = best(codec, args.runs), best(json_alone, args.runs)
    print(f"unit stores: {len(files)} files, {len(units):,} units (payloads' digest {digest}): codec {mine * 1e3:.1f} ms"
          f" | JSON alone {floor * 1e3:.1f} ms | ratio {mine / floor:.2f}")
    with tempfile.TemporaryDirectory(prefix="nanodata-bench-plain-") as tmp:
        store = EntryStore(tmp, "bench-secret-of-sixteen-chars")
        keys = [hashlib.blake2b(text.encode("utf-8", "surrogateescape"), digest_size=16).digest() for text in texts]
        for key, text in zip(keys, texts, strict=True):
            line = json.dumps({"text": text}).encode()
            doc = DocLine(head=line[:-1], tail=b"}\n", digest=key, tokens=len(text) // 4, split=False)
            store.put(key, RESULT.encode(Result(syntax_errors=False, docs=[doc], stats={"lines": text.count("\n")},
                                                signature=None, drop=None, redactions={}, payload=None)))
        paths = [p for p in Path(tmp).rglob("*") if p.is_file()]

        def read_back():
            for key in keys:
                RESULT.decode(store.get(key)[0])

        def bytes_alone():
            for path in paths:
                path.read_bytes()

        mine, floor = best(read_back, args.runs), best(bytes_alone, args.runs)
    n = len(keys)
    print(f"cache read path: {n} entries: get + decode {mine / n * 1e6:.1f} us each | reading the bytes alone "
          f"{floor / n * 1e6:.1f} us | ratio {mine / floor:.2f}")


if __name__ == "__main__":
    main()

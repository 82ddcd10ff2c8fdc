"""What the chunker stores and reads back, as plain data (nanodata.storage.plain): never pickles.

- UNITS: a parsed file (units.FileUnits), in unit stores (globalindex.UnitStore) and in the parse pass's cache
  entries; BARE_UNIT: a definition's unit without its segments (units.Unit), in unit stores and the index;
- RESULT: a file's cache entry (reuse.FileCache): its docs as their output lines (DocLine: the bytes the output
  holds, less the source, which is the run's), fidelity figures, near-dedup signature (raw little-endian uint32,
  BINS of them, checked on reading), cleaning outcome and, in the parse pass, its units, definitions and #includes.
Each codec is derived from the dataclasses' fields, so a field the chunker adds travels as it is, and changes
SCHEMA: an entry or store made before reads as a miss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nanodata.pipeline.chunking.units import FileUnits, Unit
from nanodata.pipeline.cleaning.stages import Drop
from nanodata.pipeline.dedup.minhash import BINS
from nanodata.storage.plain import Codec, Undecodable

SIGNATURE = np.dtype("<u4")
# (kind, name, unit number, qualification, owner, bare unit, text): globalindex.definitions
Definition = tuple[str, str, int, str, str, bytes, str]


@dataclass
class DocLine:
    """A doc as the output holds it (writer.doc_line_of): its output line in two pieces around its source (the
    run's: writer.output_line puts it in), its text's digest (exact dedupe's), tokens, and whether it is a piece of a
    split unit. A reused doc is copied as these bytes: no JSON decoded, encoded or hashed again."""
    head: bytes
    tail: bytes
    digest: bytes
    tokens: int
    split: bool


@dataclass
class Parsed:
    """The parse pass's payload: the file's units (UNITS), its definitions, its #includes."""
    units: bytes
    definitions: list[Definition]
    includes: list[str]


@dataclass
class Result:
    """A file's cache entry: its result without anything that depends on where it sits in the input."""
    syntax_errors: bool
    docs: list[DocLine]
    stats: dict | None
    signature: bytes | None
    drop: Drop | None
    redactions: dict[str, int] | None
    payload: Parsed | None

    def __post_init__(self):
        if self.signature is not None and len(self.signature) != BINS * SIGNATURE.itemsize:
            raise Undecodable(f"a signature of {len(self.signature)} bytes, expected {BINS * SIGNATURE.itemsize}")


UNITS = Codec(FileUnits)
# a definition's unit as lookups need it: where it lies in its file left out, read back as nowhere (one empty list of
# segments shared by every bare unit read: nothing changes a definition's segments)
BARE_UNIT = Codec(Unit, omit={Unit: {"segments": [], "body": -1, "start": 0, "end": 0, "part": None}})
RESULT = Codec(Result)
SCHEMA = b"".join(c.fingerprint for c in (UNITS, BARE_UNIT, RESULT)).hex()


def signature_bytes(signature: np.ndarray | None) -> bytes | None:
    if signature is None:
        return None
    if signature.shape != (BINS,) or signature.dtype != np.uint32:
        raise TypeError(f"a signature is {BINS} uint32, not {signature.shape} {signature.dtype}")
    return signature.astype(SIGNATURE).tobytes()


def signature_array(data: bytes | None) -> np.ndarray | None:
    """The signature raw bytes hold (a Result's: checked on decoding); Undecodable unless they are BINS uint32."""
    if data is None:
        return None
    if len(data) != BINS * SIGNATURE.itemsize:
        raise Undecodable(f"a signature of {len(data)} bytes, expected {BINS * SIGNATURE.itemsize}")
    return np.frombuffer(data, dtype=SIGNATURE).astype(np.uint32)

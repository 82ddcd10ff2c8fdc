"""Near-duplicate files: MinHash LSH over every file of a build, verified, settled into a removal list.

The rule (BigCode's, verified as The Stack v1 did): two files are near-copies when the Jaccard similarity of
their 5-gram shingle sets, estimated from their full 512-bin signatures (minhash.py), reaches the threshold
(default 0.7). A file leaves the corpus only for a *kept twin*: the files are walked in keep order (their *rank*:
a file outside every vendoring directory (VENDOR_SEGMENTS) before one inside, then the earlier file in input
order, its gid: the rule exact dedupe follows), and a file is removed when a verified pair joins it to a file
already kept; else it is kept. Connected components (BigCode's rule) would also remove a file whose only
near-twins are removed themselves (a chain A-B-C with A-C far apart loses C for A); here C stays. Ranks depend
on nothing but the input, so the removed set is the same for any partition size, worker count, bucket count or
chunking mode.

It runs as a map and two reduces, over files staged in one place (`near`: a local dir or gs:// prefix):
- signatures (`SignatureSink`, in the pass that reads each file anyway): per partition P, sigs/P.bin (fixed-size
  records: rank, size, name offset, signature), names/P.txt ("project\\tsource" lines) and bands/P.bin: each
  signature's LSH band keys, grouped by band and sorted by (key, rank), one byte range per band;
- band groups (`find_edges`, mapped): for its bands, every partition's records, sorted by (key, rank); files
  sharing a key are candidates. Each candidate is checked against the first (smallest-rank) file of its key,
  then, failing that, against up to RETRIES other members before it (each pair at or above the threshold kept),
  on the full signatures (read for candidates only), and only a pair at or above the threshold becomes an edge. No task holds all signatures: a group holds its
  bands' keys (24 bytes per file per band) and the signatures of its candidates;
- kept twins (`settle`, one task): one pass over the edges sorted by their later end (`kept_twins`), each file
  removed for its most similar kept earlier file, if any; removed.bin (sorted gids) and summary.json (each
  removed file reported with its twin and their edge's Jaccard; a cluster is a kept file and the files removed
  for it). Its memory grows with the edges, not the corpus; it reads the names of the files it reports only.

Every file is sealed where it is staged (nanodata.storage.auth; `secret`: the build's, None: load_secret's) and
read under its seal: bands.bin a piece per band, sigs.bin and names.txt a piece per block, so a group reading some
bands and its candidates' signatures checks those bytes only. One not as sealed raises BrokenSeal.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from nanodata.pipeline.dedup.minhash import BINS, band_keys, jaccard, lsh_shape
from nanodata.storage import join_uri as join
from nanodata.storage.auth import Secret, block_cuts, load_secret, read_sealed, seal_bytes, seal_file, sealed

# A path segment that marks vendored code (a copy of another project kept inside this one).
VENDOR_SEGMENTS = frozenset({"third_party", "thirdparty", "3rdparty", "vendor", "vendored", "external", "extern",
                             "deps", "contrib", "bundled", "subprojects"})
VENDORED_BIT = 1 << 63  # in a rank: a vendored file sorts after every file that is not
RETRIES = 16            # members a candidate that fails against its key's first file is also checked against
EXAMPLES_KEPT = 1000    # removed files the summary names, with the file kept and their Jaccard
LARGEST_KEPT = 20       # clusters the summary lists
COALESCE = 8            # signature records read as one range when fewer than this many lie between two wanted
GROUP_BYTES = 512 << 20  # band records a band group reads (a band at a time): 8 groups for 4.5M files
SIG_BLOCK = 16           # signature records per sealed piece: a candidate read costs at most this many records
NAME_BLOCK = 64 << 10    # bytes of names per sealed piece

SIG_DTYPE = np.dtype([("rank", "<u8"), ("size", "<u8"), ("name_start", "<u8"), ("name_len", "<u8"),
                      ("sig", "<u4", (BINS,))])
BAND_DTYPE = np.dtype([("key", "<u8"), ("rank", "<u8"), ("ref", "<u8")])  # ref: partition << 32 | record
EDGE_DTYPE = np.dtype([("a", "<u8"), ("b", "<u8"), ("jaccard", "<f4")])   # ranks, a < b
META_DTYPE = np.dtype([(name, "<u8") for name in ("rank", "size", "name_start", "name_len")])
PAIR_DTYPE = np.dtype([("first", "<u8"), ("member", "<u8")])  # refs: a key's first file, another file of it
MEMBER_DTYPE = np.dtype([("rank", "<u8"), ("ref", "<u8"), ("size", "<u8"), ("name_start", "<u8"), ("name_len", "<u8")])


def is_vendored(path: str) -> bool:
    """Whether a file lies under a vendoring directory (any directory segment of its path, case ignored)."""
    return any(segment.lower() in VENDOR_SEGMENTS for segment in path.split("/")[:-1])


def rank_of(gid: int, vendored: bool) -> int:
    return (VENDORED_BIT if vendored else 0) | gid


def gid_of_rank(ranks: np.ndarray) -> np.ndarray:
    return ranks & np.uint64(VENDORED_BIT - 1)


def _name(kind: str, number: int, suffix: str) -> str:
    return f"{kind}/{number:05d}{suffix}"


# ---------------------------------------------------------------- map: one partition's signatures

class SignatureSink:
    """A partition's signatures as find_edges reads them, written to a local directory by close()."""

    def __init__(self, directory: Path, threshold: float):
        self.directory = Path(directory)
        self.bands, self.rows = lsh_shape(threshold)
        self.records: list[tuple] = []
        self.names = bytearray()
        self.by_project: dict[str, list[int]] = {}  # project -> [files signed, bytes]

    def add(self, gid: int, path: str, size: int, project: str, source: str, signature: np.ndarray | None) -> None:
        """One file; a file of fewer than 5 tokens (no signature) is never a near-copy and is not recorded."""
        if signature is None:
            return
        name = f"{project}\t{source}\n".encode("utf-8", "surrogatepass")
        # the path inside its project: a tree's project directory named `deps` is not vendored, as a JSONL record of
        # repo `deps` is not
        inside = path[len(project) + 1:] if path.startswith(project + "/") else path
        self.records.append((rank_of(gid, is_vendored(inside)), size, len(self.names), len(name) - 1, signature))
        self.names += name
        counts = self.by_project.setdefault(project, [0, 0])
        counts[0] += 1
        counts[1] += size

    def close(self, partition: int) -> dict:
        """Write sigs.bin, names.txt, bands.bin; returns {"files", "band_offsets", "by_project"}."""
        sigs = np.zeros(len(self.records), dtype=SIG_DTYPE)
        if self.records:  # a column at a time: a record at a time costs ~10x
            for name, column in zip(SIG_DTYPE.names, zip(*self.records, strict=True), strict=True):
                sigs[name] = np.stack(column) if name == "sig" else column
        keys = band_keys(sigs["sig"], self.bands, self.rows) if len(sigs) else np.zeros((0, self.bands), np.uint64)
        bands = np.zeros((self.bands, len(sigs)), dtype=BAND_DTYPE)
        bands["key"] = keys.T
        bands["rank"] = sigs["rank"][None, :]
        bands["ref"] = (np.uint64(partition) << np.uint64(32)) | np.arange(len(sigs), dtype=np.uint64)[None, :]
        for band in bands:
            band[:] = band[np.lexsort((band["rank"], band["key"]))]
        self.directory.mkdir(parents=True, exist_ok=True)  # scratch: store_signatures makes the durable copies
        (self.directory / "sigs.bin").write_bytes(sigs.tobytes())
        (self.directory / "names.txt").write_bytes(bytes(self.names))
        (self.directory / "bands.bin").write_bytes(bands.tobytes())
        per_band = len(sigs) * BAND_DTYPE.itemsize
        return {"files": len(sigs), "band_offsets": [b * per_band for b in range(self.bands + 1)],
                "by_project": {p: c for p, c in sorted(self.by_project.items())}}


def store_signatures(directory: Path, near: str, partition: int, secret: Secret | None = None) -> None:
    """A closed sink's files into the build's `near` location (local dir or gs:// prefix), sealed: sigs.bin and
    names.txt in blocks (read at any record or name), bands.bin a piece per band (each band one range)."""
    secret = load_secret(secret)
    directory = Path(directory)
    files = (directory / "sigs.bin").stat().st_size // SIG_DTYPE.itemsize
    for local, kind, suffix, cuts in (
            ("sigs.bin", "sigs", ".bin", block_cuts(files * SIG_DTYPE.itemsize, SIG_BLOCK * SIG_DTYPE.itemsize)),
            ("names.txt", "names", ".txt", block_cuts((directory / "names.txt").stat().st_size, NAME_BLOCK)),
            ("bands.bin", "bands", ".bin", block_cuts((directory / "bands.bin").stat().st_size,
                                                      files * BAND_DTYPE.itemsize))):
        seal_file(directory / local, join(near, _name(kind, partition, suffix)), secret, cuts)


# ---------------------------------------------------------------- reduce 1: a group of bands -> verified edges

def group_count(files: int, bands: int, group_bytes: int = GROUP_BYTES) -> int:
    """How many band groups (mapped tasks): each reads about group_bytes of band records (one band at a time in
    memory) and the signatures of its candidates once, so fewer, larger groups read fewer signatures again. Every
    group holds at least one band (group_bands)."""
    wanted = max(1, min(bands, math.ceil(files * bands * BAND_DTYPE.itemsize / group_bytes)))
    return math.ceil(bands / math.ceil(bands / wanted))


def group_bands(bands: int, groups: int, group: int) -> range:
    per = math.ceil(bands / groups)
    return range(group * per, min(bands, (group + 1) * per))


def _runs(records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For records sorted by (key, rank): (first record of the key, member) index pairs of every key shared."""
    if len(records) < 2:
        return np.zeros(0, np.intp), np.zeros(0, np.intp)
    new = np.ones(len(records), dtype=bool)
    new[1:] = records["key"][1:] != records["key"][:-1]
    head = np.maximum.accumulate(np.where(new, np.arange(len(records)), 0))
    members = np.flatnonzero(~new)
    return head[members], members


def _load_signatures(near: str, refs: np.ndarray, secret: Secret) -> tuple[np.ndarray, np.ndarray]:
    """(META_DTYPE records, (n, BINS) uint16 signatures) of sorted unique refs (partition << 32 | record), read as
    coalesced ranges. Candidates are checked on each bin's low 16 bits (b-bit minwise hashing, Li and König 2010):
    half the memory of a group's candidates, and a chance agreement of 2**-16 per bin, far under the estimate's
    own error (about 0.02 at 512 bins)."""
    meta = np.zeros(len(refs), dtype=META_DTYPE)
    sigs = np.zeros((len(refs), BINS), dtype=np.uint16)
    parts = (refs >> np.uint64(32)).astype(np.int64)
    index = (refs & np.uint64(0xFFFFFFFF)).astype(np.int64)
    size = SIG_DTYPE.itemsize
    for partition in np.unique(parts).tolist():
        where = np.flatnonzero(parts == partition)
        wanted = index[where]
        breaks = np.flatnonzero(np.diff(wanted) > COALESCE) + 1
        sigs_file = sealed(join(near, _name("sigs", partition, ".bin")), secret, required=True)
        for run in np.split(np.arange(len(wanted)), breaks):
            first, last = int(wanted[run[0]]), int(wanted[run[-1]])
            block = np.frombuffer(sigs_file.read(first * size, (last + 1) * size), dtype=SIG_DTYPE)[wanted[run] - first]
            for name in META_DTYPE.names:
                meta[name][where[run]] = block[name]
            sigs[where[run]] = block["sig"].astype(np.uint16)  # the low 16 bits
    return meta, sigs


def _names(near: str, members: np.ndarray, secret: Secret) -> list[tuple[str, str]]:
    """(project, source) of each MEMBER_DTYPE record, read from its partition's names file (coalesced ranges)."""
    names: list[tuple[str, str]] = [("", "")] * len(members)
    parts = (members["ref"] >> np.uint64(32)).astype(np.int64)
    for partition in np.unique(parts).tolist():
        where = np.flatnonzero(parts == partition)
        where = where[np.argsort(members["name_start"][where], kind="stable")]
        starts, ends = members["name_start"][where], members["name_start"][where] + members["name_len"][where]
        breaks = np.flatnonzero(starts[1:] - ends[:-1] > COALESCE * 128) + 1
        names_file = sealed(join(near, _name("names", partition, ".txt")), secret, required=True)
        for run in np.split(np.arange(len(where)), breaks):
            lo = int(starts[run[0]])
            block = names_file.read(lo, int(ends[run].max()))
            for i, start, stop in zip(where[run].tolist(), (starts[run] - lo).tolist(), (ends[run] - lo).tolist(),
                                      strict=True):
                project, _, source = block[start:stop].decode("utf-8", "surrogatepass").partition("\t")
                names[i] = (project, source)
    return names


def unique_rows(rows: np.ndarray) -> np.ndarray:
    """np.unique of a structured array (its rows sorted by their fields in order, one of each), by lexsort of the
    fields: numpy's own sorts the rows as opaque records, several times slower (0.3 s of a rebuild's near step)."""
    rows = rows[np.lexsort([rows[name] for name in reversed(rows.dtype.names)])]
    new = np.ones(len(rows), dtype=bool)
    new[1:] = rows[1:] != rows[:-1]
    return rows[new]


def find_edges(near: str, group: int, bands: range, partitions: list[tuple[int, list[int]]], threshold: float,
               secret: Secret | None = None) -> dict:
    """Mapped: the verified near-copy pairs among the files sharing a key in any of `bands`, written to
    edges/GGGGG.bin (EDGE_DTYPE) and members/GGGGG.bin (MEMBER_DTYPE: each file of an edge, where its name is).
    partitions: (partition number, its band_offsets) of every partition that signed a file."""
    secret = load_secret(secret)
    band_files = {p: sealed(join(near, _name("bands", p, ".bin")), secret, required=True) for p, _ in partitions}
    heads, members = [], []
    for band in bands:
        records = [np.frombuffer(band_files[p].read(offsets[band], offsets[band + 1]), dtype=BAND_DTYPE)
                   for p, offsets in partitions if offsets[band + 1] > offsets[band]]
        merged = np.concatenate(records) if records else np.zeros(0, BAND_DTYPE)
        merged = merged[np.lexsort((merged["rank"], merged["key"]))]
        head, member = _runs(merged)
        heads.append(merged[head][["rank", "ref"]])
        members.append(merged[member][["rank", "ref", "key"]])
    head = np.concatenate(heads) if heads else np.zeros(0, BAND_DTYPE[["rank", "ref"]])
    member = np.concatenate(members) if members else np.zeros(0, BAND_DTYPE[["rank", "ref", "key"]])
    # one check per (first, member) pair, however many bands it shares
    pairs = np.zeros(len(head), dtype=PAIR_DTYPE)
    pairs["first"], pairs["member"] = head["ref"], member["ref"]
    pairs = unique_rows(pairs)
    refs = np.unique(np.concatenate([pairs["first"], pairs["member"]]))
    meta, sigs = _load_signatures(near, refs, secret)
    row = {int(r): i for i, r in enumerate(refs.tolist())}
    ia = np.searchsorted(refs, pairs["first"])
    ib = np.searchsorted(refs, pairs["member"])
    similar = jaccard(sigs[ia], sigs[ib]) if len(pairs) else np.zeros(0)
    passed = similar >= threshold
    edges = [(ia[passed], ib[passed], similar[passed])]
    retried = _retry_failed(member, sigs, row, set(pairs["member"][~passed].tolist()), threshold)
    if retried:
        a, b, j = zip(*retried, strict=True)
        edges.append((np.array(a, np.intp), np.array(b, np.intp), np.array(j)))
    a = np.concatenate([e[0] for e in edges]).astype(np.intp)
    b = np.concatenate([e[1] for e in edges]).astype(np.intp)
    j = np.concatenate([e[2] for e in edges]).astype(np.float32)
    ranks = meta["rank"]
    out = np.zeros(len(a), dtype=EDGE_DTYPE)
    out["a"], out["b"], out["jaccard"] = np.minimum(ranks[a], ranks[b]), np.maximum(ranks[a], ranks[b]), j
    out = unique_rows(out)  # sorted, one row per pair
    seal_bytes(join(near, _name("edges", group, ".bin")), out.tobytes(), secret)
    used = np.unique(np.concatenate([a, b]))
    members = np.zeros(len(used), dtype=MEMBER_DTYPE)
    for field in ("rank", "size", "name_start", "name_len"):
        members[field] = meta[field][used]
    members["ref"] = refs[used]
    seal_bytes(join(near, _name("members", group, ".bin")), members.tobytes(), secret)
    return {"group": group, "bands": [bands.start, bands.stop], "candidate_pairs": len(pairs),
            "edges": len(out), "rejected": int((~passed).sum()) - len(retried)}


def _retry_failed(member: np.ndarray, sigs: np.ndarray, row: dict, failed: set, threshold: float) -> list:
    """A candidate unlike its key's first file may still be like another member of that key (a cluster that
    drifts): check it against up to RETRIES members before it, in rank order, and keep every pair that passes
    (settle removes a file only for a kept twin: the first file it is like may be removed itself). Only keys
    holding such a candidate are looked at."""
    if not failed:
        return []
    member = member[np.lexsort((member["rank"], member["key"]))]
    new = np.ones(len(member), dtype=bool)
    new[1:] = member["key"][1:] != member["key"][:-1]
    run_start = np.maximum.accumulate(np.where(new, np.arange(len(member)), 0))
    found = []
    for i in np.flatnonzero(np.isin(member["ref"], np.fromiter(failed, dtype=np.uint64, count=len(failed)))).tolist():
        earlier = [row[int(r)] for r in member["ref"][max(int(run_start[i]), i - RETRIES):i].tolist()]
        if earlier:
            this = row[int(member["ref"][i])]
            similar = jaccard(sigs[earlier], sigs[this])
            found.extend((other, this, float(j)) for other, j in zip(earlier, similar.tolist(), strict=True)
                         if j >= threshold)
    return found


# ---------------------------------------------------------------- reduce 2: edges -> kept twins -> removed files

def kept_twins(a: np.ndarray, b: np.ndarray, jaccard: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(twin, similarity) of n nodes numbered in keep order, joined by verified edges a < b: a node's twin is -1
    when it is kept, else the kept earlier node it is removed for, the most similar one (ties: the earlier), and
    similarity that edge's estimate. One pass over the edges sorted by their later end: every node's edges to
    earlier nodes are read after those nodes are settled."""
    twin = np.full(n, -1, dtype=np.int64)
    similar = np.zeros(n, dtype=np.float32)
    order = np.lexsort((a, -jaccard, b))   # by later end, then most similar first, then earlier first
    for x, y, j in zip(a[order].tolist(), b[order].tolist(), jaccard[order].tolist(), strict=True):
        if twin[y] < 0 and twin[x] < 0:   # y not yet removed, x kept: y's best kept twin is the first seen
            twin[y], similar[y] = x, j
    return twin, similar


def settle(near: str, groups: int, by_project: dict, threshold: float, secret: Secret | None = None) -> dict:
    """One task: every group's edges -> connected components -> removed.bin (sorted gids of the files that lose
    their docs) and summary.json. by_project: project -> [files signed, bytes], summed over partitions."""
    secret = load_secret(secret)
    edges = [np.frombuffer(read_sealed(join(near, _name("edges", g, ".bin")), secret, required=True),
                           dtype=EDGE_DTYPE) for g in range(groups)]
    edge = unique_rows(np.concatenate(edges)) if edges else np.zeros(0, EDGE_DTYPE)
    members = np.concatenate([np.frombuffer(read_sealed(join(near, _name("members", g, ".bin")), secret, required=True),
                                            dtype=MEMBER_DTYPE) for g in range(groups)] or [np.zeros(0, MEMBER_DTYPE)])
    nodes = np.unique(np.concatenate([edge["a"], edge["b"]])) if len(edge) else np.zeros(0, np.uint64)
    _, first = np.unique(members["rank"], return_index=True)  # every node is a member of the group of its edges
    members = members[first]  # aligned with nodes: both sorted by rank
    ia, ib = np.searchsorted(nodes, edge["a"]), np.searchsorted(nodes, edge["b"])
    twin, similar_to = kept_twins(ia, ib, edge["jaccard"], len(nodes))
    removed = np.flatnonzero(twin >= 0)
    kept = twin[removed]
    similar = similar_to[removed]
    label = np.where(twin >= 0, twin, np.arange(len(nodes)))   # a cluster: a kept file and those removed for it
    removed_gids = np.sort(gid_of_rank(nodes[removed]))
    seal_bytes(join(near, "removed.bin"), removed_gids.astype("<u8").tobytes(), secret)
    summary = _summary(near, nodes, label, removed, kept, similar, members, by_project, threshold, secret)
    summary["candidate_pairs_verified"] = int(len(edge))
    seal_bytes(join(near, "summary.json"), json.dumps(summary, indent=1, sort_keys=True).encode(), secret)
    return summary


def _summary(near: str, nodes, label, removed, kept, similar, members: np.ndarray, by_project: dict,
             threshold: float, secret: Secret) -> dict:
    """What settle reports; names are read for the removed files and the kept files it names only."""
    sizes = members["size"].astype(np.int64)
    roots, cluster_size = np.unique(label, return_counts=True)
    cluster_bytes = np.bincount(label, weights=sizes, minlength=len(nodes))
    biggest = sorted(zip((-cluster_size).tolist(), roots.tolist(), strict=True))[:LARGEST_KEPT]
    shown = sorted(set(removed.tolist()) | set(kept[:EXAMPLES_KEPT].tolist()) | {root for _, root in biggest})
    name = dict(zip(shown, _names(near, members[shown], secret) if shown else [], strict=True))
    projects: dict[str, dict] = {}
    for r in removed.tolist():
        counts = projects.setdefault(name[r][0], {"removed": 0, "bytes_removed": 0})
        counts["removed"] += 1
        counts["bytes_removed"] += int(sizes[r])
    for project, counts in projects.items():
        files, size = by_project.get(project, [counts["removed"], counts["bytes_removed"]])
        counts.update(files=files, bytes=size, kept=files - counts["removed"])
    edges = np.linspace(threshold, 1.0, 11) if threshold < 1 else np.array([1.0, 1.0])
    histogram = np.histogram(similar, bins=edges)[0] if len(similar) else np.zeros(len(edges) - 1, int)
    removed_of = {root: [] for _, root in biggest}
    for r, k in zip(removed.tolist(), kept.tolist(), strict=True):
        if k in removed_of:
            removed_of[k].append(name[r][0])
    bands, rows = lsh_shape(threshold)
    return {
        "threshold": threshold, "bands": bands, "rows": rows,
        "files_removed": int(len(removed)), "bytes_removed": int(sizes[removed].sum()) if len(removed) else 0,
        "clusters": int(len(roots)),
        "files_signed": int(sum(c[0] for c in by_project.values())),
        "examples": [{"removed": name[r][1], "kept": name[k][1], "jaccard": round(float(j), 4)}
                     for r, k, j in list(zip(removed.tolist(), kept.tolist(), similar.tolist(), strict=True))[:EXAMPLES_KEPT]],
        "by_project": dict(sorted(projects.items(), key=lambda item: (-item[1]["removed"], item[0]))),
        "largest_clusters": [{"kept": name[root][1], "files": -negative, "bytes": int(cluster_bytes[root]),
                              "removed_projects": sorted(set(removed_of[root]))[:10]}
                             for negative, root in biggest],
        "jaccard_histogram": [{"from": round(float(lo), 3), "to": round(float(hi), 3), "files": int(n)}
                              for lo, hi, n in zip(edges[:-1], edges[1:], histogram, strict=True)],
    }


def load_removed(near: str, secret: Secret | None = None) -> np.ndarray:
    """The sorted gids whose docs are dropped (empty when nothing was removed), under settle's seal."""
    return np.frombuffer(read_sealed(join(near, "removed.bin"), load_secret(secret), required=True), dtype="<u8")


def is_removed(removed: np.ndarray, gids: np.ndarray) -> np.ndarray:
    """Elementwise: whether each gid is in the sorted removed array."""
    if not len(removed) or not len(gids):
        return np.zeros(len(gids), dtype=bool)
    at = np.minimum(np.searchsorted(removed, gids), len(removed) - 1)
    return removed[at] == gids


def signed_partitions(signed: list[tuple[int, dict]]) -> tuple[list[tuple[int, list[int]]], dict, int]:
    """From each partition's sink result (number, SignatureSink.close()): find_edges' partition list, the files
    signed per project summed (project -> [files, bytes]), and the number of files signed."""
    partitions = [(number, info["band_offsets"]) for number, info in signed if info["files"]]
    by_project: dict[str, list[int]] = {}
    for _, info in signed:
        for project, (files, size) in info["by_project"].items():
            counts = by_project.setdefault(project, [0, 0])
            counts[0] += files
            counts[1] += size
    return partitions, by_project, sum(info["files"] for _, info in signed)

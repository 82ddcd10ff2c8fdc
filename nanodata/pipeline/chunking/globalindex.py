"""The global modes' map -> reduce -> map, on disk: unit stores, the reduce, and the index lookups.

- map (parse): each partition's parsed files go to a *unit store* (one SQLite file): per file its
  parsed units (pickled FileUnits), per named function/type definition its name, id and text,
  per project its #includes. Nothing is kept in memory beyond one file.
- reduce (`build_index`): reads every store's names and ids, never loading them all at once (SQLite
  sorts and groups on disk), and writes the *index*: the project order (ranks from the #include
  graph), for each (kind, name) the one definition a lookup can resolve to, and the text of those
  definitions only. Its memory is SQLite's page cache plus the project graph (projects and their
  dependencies, not files).
- map (emit): each partition's files are emitted with `GlobalIndex` lookups (bounded caches).

Resolution rule (as before, now answered by one row per name): definitions of a name sorted by
(rank, gid, unit); with the first two at ranks r1 <= r2, a root at rank R sees exactly one
definition, the first, iff r1 <= R < r2 (r2 absent: no second definition).
"""

from __future__ import annotations

import os
import pickle
import sqlite3
from pathlib import Path

from nanodata.pipeline.chunking.graphs import topo_order
from nanodata.storage.files import commit, temp_name

PICKLE = pickle.HIGHEST_PROTOCOL
CACHE_ENTRIES = 50_000   # per lookup cache in an emitting process; cleared when full
SQLITE_CACHE_KIB = 64 * 1024

STORE_SCHEMA = """
CREATE TABLE files(gid INTEGER PRIMARY KEY, source TEXT, project TEXT, path TEXT, size INTEGER,
                   syntax_errors INTEGER, units BLOB);
CREATE TABLE defs(kind TEXT, name TEXT, project TEXT, gid INTEGER, uid INTEGER, unit BLOB, text TEXT);
CREATE TABLE includes(project TEXT, include TEXT, PRIMARY KEY(project, include)) WITHOUT ROWID;
"""
INDEX_SCHEMA = """
CREATE TABLE projects(name TEXT PRIMARY KEY, rank INTEGER) WITHOUT ROWID;
CREATE TABLE names(kind TEXT, name TEXT, r1 INTEGER, r2 INTEGER, gid INTEGER, uid INTEGER,
                   PRIMARY KEY(kind, name)) WITHOUT ROWID;
CREATE TABLE units(gid INTEGER, uid INTEGER, unit BLOB, text TEXT, PRIMARY KEY(gid, uid)) WITHOUT ROWID;
"""


def _connect(path: str | os.PathLike, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        db = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True, check_same_thread=False)
    else:
        db = sqlite3.connect(path)
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("PRAGMA synchronous=OFF")
    db.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
    db.execute("PRAGMA temp_store=FILE")
    return db


def _fresh(path: Path) -> sqlite3.Connection:
    path.unlink(missing_ok=True)
    return _connect(path)


class UnitStore:
    """The parse pass's output for one partition (write with add_file, then close)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.db = _fresh(self.path)
        self.db.executescript(STORE_SCHEMA)

    def add_file(self, gid: int, size: int, syntax_errors: bool, source: str, project: str, path: str,
                 units_blob: bytes, defs: list[tuple], includes: list[str]) -> None:
        self.db.execute("INSERT INTO files VALUES (?,?,?,?,?,?,?)",
                        (gid, source, project, path, size, int(syntax_errors), units_blob))
        self.db.executemany("INSERT INTO defs VALUES (?,?,?,?,?,?,?)",
                            [(kind, name, project, gid, uid, unit, text) for kind, name, uid, unit, text in defs])
        self.db.executemany("INSERT OR IGNORE INTO includes VALUES (?,?)", [(project, i) for i in includes])

    def close(self) -> None:
        self.db.commit()
        self.db.close()


def definitions(fu) -> list[tuple]:
    """(kind, name, unit number, pickled bare unit, text) of each named function/type of a parsed file:
    what other files can pull in. The unit keeps what lookups need (scope, tokens, names), not segments."""
    out = []
    for u, unit in enumerate(fu.units):
        if unit.kind in ("function", "type") and unit.name:
            bare = (unit.kind, unit.name, unit.owner, unit.scope, unit.tokens, unit.calls, unit.types)
            out.append((unit.kind, unit.name, u, pickle.dumps(bare, PICKLE), fu.text_of(unit)))
    return out


def stored_files(store: str | os.PathLike, index: str | os.PathLike | None = None):
    """(gid, source, project, size, syntax_errors, units blob, rank) of a store's files, in emit order:
    (project rank, gid) with an index, else gid."""
    db = _connect(store, readonly=True)
    try:
        if index is None:
            yield from db.execute("SELECT gid, source, project, size, syntax_errors, units, 0 FROM files ORDER BY gid")
        else:
            db.execute("ATTACH DATABASE ? AS idx", (f"file:{Path(index).resolve()}?mode=ro",))
            yield from db.execute("SELECT f.gid, f.source, f.project, f.size, f.syntax_errors, f.units, p.rank "
                                  "FROM files f JOIN idx.projects p ON p.name = f.project ORDER BY p.rank, f.gid")
    finally:
        db.close()


def _project_ranks(db: sqlite3.Connection, by_includes: bool) -> None:
    """Fill projects.rank: name order, or (project mode) #include order with dependencies first.

    A project depends on the projects holding a file whose path ends with one of its #include
    paths, unless it holds such a file itself; the path suffixes and includes live in tables."""
    if not by_includes:
        db.execute("UPDATE projects SET rank = 0")
        return
    names = [n for (n,) in db.execute("SELECT name FROM projects ORDER BY name")]
    deps: dict[str, list[str]] = {}
    rows = db.execute("""
        SELECT DISTINCT i.project, s.project FROM incl i JOIN suffixes s ON s.suffix = i.path
        WHERE s.project != i.project AND NOT EXISTS
          (SELECT 1 FROM suffixes own WHERE own.suffix = i.path AND own.project = i.project)
        ORDER BY i.project, s.project""")
    for project, dep in rows:
        deps.setdefault(project, []).append(dep)
    db.executemany("UPDATE projects SET rank = ? WHERE name = ?",
                   [(rank, name) for rank, name in enumerate(topo_order(names, deps))])


def build_index(stores, index_path: str | os.PathLike, mode: str, scratch_dir: str | os.PathLike,
                fetch=lambda store: store, release=lambda store: None) -> dict:
    """The reduce: every store's names and ids -> the index file (written whole, then renamed).

    Each store is read once, in order: `fetch(store)` gives its local path (a download, in a DAG
    task) and `release(store)` says it is no longer needed. Definitions' text goes to a scratch
    table on disk; only the text of definitions a lookup can resolve to is copied into the index."""
    index_path = Path(index_path)
    scratch_path = Path(scratch_dir) / "reduce.sqlite"
    scratch = _fresh(scratch_path)
    scratch.executescript("""
        CREATE TABLE projects(name TEXT PRIMARY KEY, rank INTEGER) WITHOUT ROWID;
        CREATE TABLE alldefs(kind TEXT, name TEXT, project TEXT, gid INTEGER, uid INTEGER, unit BLOB, text TEXT);
        CREATE TABLE suffixes(suffix TEXT, project TEXT);
        CREATE TABLE incl(project TEXT, path TEXT);
    """)
    by_includes = mode == "project"
    for store in stores:
        scratch.execute("ATTACH DATABASE ? AS s", (str(fetch(store)),))
        scratch.execute("INSERT OR IGNORE INTO projects(name) SELECT DISTINCT project FROM s.files")
        scratch.execute("INSERT INTO alldefs SELECT * FROM s.defs")
        if by_includes:
            for project, path in scratch.execute("SELECT project, path FROM s.files"):
                parts = path.split("/")
                scratch.executemany("INSERT INTO suffixes VALUES (?, ?)",
                                    [("/".join(parts[k:]), project) for k in range(len(parts))])
            scratch.execute("INSERT INTO incl SELECT project, ltrim(include, './') FROM s.includes")
        scratch.commit()
        scratch.execute("DETACH DATABASE s")
        release(store)
    if by_includes:
        scratch.execute("CREATE INDEX suffix_key ON suffixes(suffix, project)")
    scratch.execute("CREATE INDEX alldefs_ref ON alldefs(gid, uid)")
    _project_ranks(scratch, by_includes)
    scratch.commit()

    tmp = temp_name(index_path)
    scratch.execute("ATTACH DATABASE ? AS idx", (str(_init_index(tmp)),))
    scratch.execute("INSERT INTO idx.projects SELECT name, rank FROM projects")
    scratch.execute("""
        INSERT INTO idx.names
        SELECT kind, name, r1, r2, gid, uid FROM (
          SELECT d.kind, d.name, p.rank AS r1, d.gid, d.uid,
                 LEAD(p.rank) OVER w AS r2, ROW_NUMBER() OVER w AS n
          FROM alldefs d JOIN projects p ON p.name = d.project
          WINDOW w AS (PARTITION BY d.kind, d.name ORDER BY p.rank, d.gid, d.uid))
        WHERE n = 1 AND (r2 IS NULL OR r2 > r1)""")
    # the text of the definitions a lookup can return, nothing else
    scratch.execute("""INSERT INTO idx.units SELECT d.gid, d.uid, d.unit, d.text FROM idx.names n
                       JOIN alldefs d ON d.gid = n.gid AND d.uid = n.uid""")
    scratch.commit()
    counts = {"names": scratch.execute("SELECT count(*) FROM idx.names").fetchone()[0],
              "projects": scratch.execute("SELECT count(*) FROM projects").fetchone()[0]}
    scratch.execute("DETACH DATABASE idx")
    scratch.close()
    scratch_path.unlink()
    commit(tmp, index_path)
    return counts


def _init_index(path: Path) -> Path:
    db = _fresh(path)
    db.executescript(INDEX_SCHEMA)
    db.commit()
    db.close()
    return path


class GlobalIndex:
    """Lookups an emitting process makes: unique names, definitions' units and text (bounded caches)."""

    def __init__(self, path: str | os.PathLike):
        self.db = _connect(path, readonly=True)
        self._unique: dict = {}
        self._units: dict = {}

    def unique(self, kind: str, name: str, rank: int):
        key = (kind, name)
        if key not in self._unique:
            if len(self._unique) >= CACHE_ENTRIES:
                self._unique.clear()
            self._unique[key] = self.db.execute("SELECT r1, r2, gid, uid FROM names WHERE kind = ? AND name = ?",
                                                key).fetchone()
        row = self._unique[key]
        if row is None or rank < row[0] or (row[1] is not None and rank >= row[1]):
            return None
        return row[2], row[3]

    def _load(self, ref):
        if ref not in self._units:
            if len(self._units) >= CACHE_ENTRIES:
                self._units.clear()
            blob, text = self.db.execute("SELECT unit, text FROM units WHERE gid = ? AND uid = ?", ref).fetchone()
            from nanodata.pipeline.chunking.units import Unit

            kind, name, owner, scope, tokens, calls, types = pickle.loads(blob)
            self._units[ref] = (Unit(kind, name, owner, scope, [], -1, 0, 0, tokens, calls=calls, types=types), text)
        return self._units[ref]

    def unit(self, ref):
        return self._load(ref)[0]

    def text(self, ref) -> str:
        return self._load(ref)[1]

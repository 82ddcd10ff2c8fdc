"""The global modes' map -> reduce -> map, on disk: unit stores, the reduce, and the index lookups.

- map (parse): each partition's parsed files go to a *unit store* (one SQLite file): per file its
  parsed units (FileUnits as plain data: stored.UNITS), per named function/type definition its name,
  qualification, id and text, per file its #includes. Nothing is kept in memory beyond one file.
- reduce (`build_index`): reads every store's names and ids, never loading them all at once (SQLite
  sorts and groups on disk), and writes the *index*: the project order (ranks from the #include
  graph), each file's project and the other projects whose headers it includes, every definition's
  (project, kind, name, qualification), and the text of the definitions a lookup can resolve to.
  Its memory is SQLite's page cache plus the project graph (projects and their dependencies).
- map (emit): each partition's files are emitted with `GlobalIndex` lookups (bounded caches).

Resolution rule: a name used in file F (project P) resolves among what F can see, nearest first:
the definitions in P; when P has none that match, those in the projects whose headers F
#includes (by path suffix, as for the project order; an include P satisfies itself names no other
project; in project mode, only projects ranked before P). Unrelated projects, vendored copies of P
included, are never seen, so P's docs do not change when they sit beside it. A use qualified every
time (`a::b::f`, `C::iterator`) matches definitions whose namespaces/class contain its last scope
(`b`, `C`), else only definitions with no known qualification (a namespace hidden by a macro); an
unqualified type use never matches a nested type defined out of its class (`class path::iterator`)
unless used from that class. The match must be one definition: names defined twice with one
qualification in a project are *ambiguous* there (counted per project) and resolve to nothing.

With the clang resolver (clangpass), a store also holds each file's definitions by USR (the unit holding each);
the index maps USR -> definition unit per project, and `resolve_usr` scopes a USR as names are scoped.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
from pathlib import Path

from nanodata.pipeline.chunkbuild.stored import BARE_UNIT
from nanodata.pipeline.chunking.graphs import topo_order
from nanodata.storage.files import commit, temp_name

CACHE_ENTRIES = 50_000   # per lookup cache in an emitting process; cleared when full
_MISSING = object()   # a lookup not cached yet (None is an answer: nothing or ambiguous)
SQLITE_CACHE_KIB = 64 * 1024

STORE_SCHEMA = """
CREATE TABLE files(gid INTEGER PRIMARY KEY, source TEXT, project TEXT, path TEXT, size INTEGER,
                   syntax_errors INTEGER, units BLOB, digest TEXT);
CREATE TABLE defs(kind TEXT, name TEXT, project TEXT, gid INTEGER, uid INTEGER, chain TEXT, owner TEXT,
                  unit BLOB, text TEXT);
CREATE TABLE includes(gid INTEGER, project TEXT, include TEXT, PRIMARY KEY(gid, include)) WITHOUT ROWID;
CREATE TABLE usrs(usr TEXT, project TEXT, gid INTEGER, uid INTEGER);
"""
INDEX_SCHEMA = """
CREATE TABLE projects(name TEXT PRIMARY KEY, rank INTEGER, view TEXT) WITHOUT ROWID;
CREATE TABLE files(gid INTEGER PRIMARY KEY, project TEXT, ordinal INTEGER);
CREATE TABLE deps(gid INTEGER, project TEXT, PRIMARY KEY(gid, project)) WITHOUT ROWID;
CREATE TABLE defs(project TEXT, kind TEXT, name TEXT, gid INTEGER, uid INTEGER, chain TEXT, owner TEXT,
                  PRIMARY KEY(project, kind, name, gid, uid)) WITHOUT ROWID;
CREATE TABLE units(gid INTEGER, uid INTEGER, unit BLOB, text TEXT, PRIMARY KEY(gid, uid)) WITHOUT ROWID;
CREATE TABLE usrs(project TEXT, usr TEXT, gid INTEGER, uid INTEGER, PRIMARY KEY(project, usr, gid, uid)) WITHOUT ROWID;
"""
AMBIGUOUS_LISTED = 100   # projects named in the counts (most ambiguous first); the total covers all
NAMESPACE = re.compile(r"\bnamespace\s+((?:\w+\s*::\s*)*\w+)\s*\{")


def _connect(path: str | os.PathLike, readonly: bool = False) -> sqlite3.Connection:
    """A store or index to write, or (readonly) one written whole before it is read and never changed after (an index
    is renamed into place): read as immutable, so a lookup takes no file lock and rereads no header (half its time)."""
    if readonly:
        db = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro&immutable=1", uri=True, check_same_thread=False)
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
                 units_blob: bytes, defs: list[tuple], includes: list[str], digest: str | None = None,
                 usrs: list[tuple[str, int]] = ()) -> None:
        """usrs: (USR, unit number) of the definitions clang found in the file's units (the clang resolver)."""
        self.db.execute("INSERT INTO files VALUES (?,?,?,?,?,?,?,?)",
                        (gid, source, project, path, size, int(syntax_errors), units_blob, digest))
        self.db.executemany("INSERT INTO defs VALUES (?,?,?,?,?,?,?,?,?)",
                            [(kind, name, project, gid, uid, chain, owner, unit, text)
                             for kind, name, uid, chain, owner, unit, text in defs])
        self.db.executemany("INSERT OR IGNORE INTO includes VALUES (?,?,?)", [(gid, project, i) for i in includes])
        self.db.executemany("INSERT INTO usrs VALUES (?,?,?,?)", [(usr, project, gid, uid) for usr, uid in usrs])

    def close(self) -> None:
        self.db.commit()
        self.db.close()


def _namespaces(scope: tuple) -> list[str]:
    """The namespaces a scope's openers open, in order."""
    return [re.sub(r"\s+", "", m.group(1)) for opener, *_ in scope for m in [NAMESPACE.search(opener)] if m]


def definitions(fu) -> list[tuple]:
    """(kind, name, unit number, qualification, owner, bare unit (stored.BARE_UNIT), text) of each named
    function/type of a parsed file: what other files can pull in. The unit keeps what lookups need
    (scope, tokens, names, and any field the chunker adds), not its segments nor its Part (BARE_UNIT leaves them
    out)."""
    out = []
    spaces: dict[int, list[str]] = {}  # by the scope's identity: a file's units share a few scopes
    memo: dict = {}  # (BARE_UNIT converts each scope once)
    for u, unit in enumerate(fu.units):
        if unit.kind in ("function", "type") and unit.name:
            namespaces = spaces.get(id(unit.scope))
            if namespaces is None:
                namespaces = spaces[id(unit.scope)] = _namespaces(unit.scope)
            qualification = "::".join(namespaces + [unit.owner] if unit.owner else namespaces)  # `a::b::Owner`
            out.append((unit.kind, unit.name, u, qualification, unit.owner, BARE_UNIT.encode(unit, memo),
                        fu.text_of(unit)))
    return out


def stored_files(store: str | os.PathLike, index: str | os.PathLike | None = None):
    """(gid, source, project, size, syntax_errors, units blob, rank, view digest, ordinal) of a store's files, in
    emit order: (project rank, gid) with an index, else gid (view and ordinal None then: see view_digests)."""
    db = _connect(store, readonly=True)
    try:
        if index is None:
            yield from db.execute("SELECT gid, source, project, size, syntax_errors, units, 0, NULL, NULL FROM files "
                                  "ORDER BY gid")
        else:
            db.execute("ATTACH DATABASE ? AS idx", (f"file:{Path(index).resolve()}?mode=ro",))
            yield from db.execute("SELECT f.gid, f.source, f.project, f.size, f.syntax_errors, f.units, p.rank, p.view, "
                                  "i.ordinal FROM files f JOIN idx.projects p ON p.name = f.project "
                                  "JOIN idx.files i ON i.gid = f.gid ORDER BY p.rank, f.gid")
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
    rows = db.execute("SELECT DISTINCT f.project, d.project FROM deps d JOIN files f ON f.gid = d.gid "
                      "ORDER BY f.project, d.project")
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
        CREATE TABLE files(gid INTEGER PRIMARY KEY, project TEXT, path TEXT, digest TEXT);
        CREATE TABLE alldefs(kind TEXT, name TEXT, project TEXT, gid INTEGER, uid INTEGER, chain TEXT, owner TEXT,
                             unit BLOB, text TEXT);
        CREATE TABLE suffixes(suffix TEXT, project TEXT);
        CREATE TABLE incl(gid INTEGER, project TEXT, path TEXT);
        CREATE TABLE usrs(usr TEXT, project TEXT, gid INTEGER, uid INTEGER);
    """)
    for store in stores:
        scratch.execute("ATTACH DATABASE ? AS s", (str(fetch(store)),))
        scratch.execute("INSERT OR IGNORE INTO projects(name) SELECT DISTINCT project FROM s.files")
        scratch.execute("INSERT INTO files SELECT gid, project, path, digest FROM s.files")
        scratch.execute("INSERT INTO alldefs SELECT * FROM s.defs")
        scratch.execute("INSERT INTO usrs SELECT * FROM s.usrs")
        for project, path in scratch.execute("SELECT project, path FROM s.files"):
            parts = path.split("/")
            scratch.executemany("INSERT INTO suffixes VALUES (?, ?)",
                                [("/".join(parts[k:]), project) for k in range(len(parts))])
        scratch.execute("INSERT INTO incl SELECT gid, project, ltrim(include, './') FROM s.includes")
        scratch.commit()
        scratch.execute("DETACH DATABASE s")
        release(store)
    scratch.execute("CREATE INDEX suffix_key ON suffixes(suffix, project)")
    scratch.execute("CREATE INDEX alldefs_key ON alldefs(project, kind, name, chain)")
    # a file depends on the projects holding a header it includes (matched by path suffix), unless
    # its own project holds one: `#include "db.h"` in leveldb never means a vendored copy's db.h
    # (matched once per distinct (project, include), then spread to the files that include it)
    scratch.execute("""
        CREATE TABLE heads AS SELECT DISTINCT i.project, i.path, s.project AS dep
        FROM (SELECT DISTINCT project, path FROM incl) i JOIN suffixes s ON s.suffix = i.path
        WHERE s.project != i.project AND NOT EXISTS
          (SELECT 1 FROM suffixes own WHERE own.suffix = i.path AND own.project = i.project)""")
    scratch.execute("CREATE INDEX heads_key ON heads(project, path)")
    scratch.execute("""CREATE TABLE deps AS SELECT DISTINCT i.gid, h.dep AS project FROM incl i
                       JOIN heads h ON h.project = i.project AND h.path = i.path""")
    _project_ranks(scratch, mode == "project")
    scratch.commit()

    tmp = temp_name(index_path)
    scratch.execute("ATTACH DATABASE ? AS idx", (str(_init_index(tmp)),))
    scratch.execute("INSERT INTO idx.projects SELECT name, rank, NULL FROM projects")
    scratch.execute("INSERT INTO idx.files SELECT gid, project, row_number() OVER (PARTITION BY project ORDER BY gid) "
                    "FROM files")
    # project mode grows the index project by project: a dependency ranked after the file's project
    # (an #include cycle broken there) is not visible yet; other modes rank every project 0
    scratch.execute("""
        INSERT INTO idx.deps SELECT d.gid, d.project FROM deps d JOIN files f ON f.gid = d.gid
        JOIN projects own ON own.name = f.project JOIN projects dep ON dep.name = d.project
        WHERE dep.rank <= own.rank ORDER BY d.gid, d.project""")
    scratch.execute("INSERT INTO idx.defs SELECT project, kind, name, gid, uid, chain, owner FROM alldefs "
                    "ORDER BY project, kind, name, gid, uid")
    # the text of the definitions a lookup can return: one of their (project, kind, name,
    # qualification) in a project (any filter that leaves one definition leaves such a one)
    scratch.execute("""
        INSERT INTO idx.units SELECT d.gid, d.uid, d.unit, d.text FROM alldefs d JOIN (
          SELECT project, kind, name, chain FROM alldefs GROUP BY project, kind, name, chain HAVING count(*) = 1
        ) u ON u.project = d.project AND u.kind = d.kind AND u.name = d.name AND u.chain = d.chain
        ORDER BY d.gid, d.uid""")
    # the clang resolver's definitions by USR, and the text of those units (each is a named definition's)
    scratch.execute("INSERT INTO idx.usrs SELECT DISTINCT project, usr, gid, uid FROM usrs ORDER BY project, usr, gid, uid")
    scratch.execute("""
        INSERT OR IGNORE INTO idx.units SELECT d.gid, d.uid, d.unit, d.text FROM alldefs d
        JOIN (SELECT DISTINCT gid, uid FROM usrs) u ON u.gid = d.gid AND u.uid = d.uid ORDER BY d.gid, d.uid""")
    _view_digests(scratch)
    scratch.commit()
    ambiguous = scratch.execute("""
        SELECT project, count(DISTINCT kind || ' ' || name) AS n FROM (
          SELECT project, kind, name FROM alldefs GROUP BY project, kind, name, chain HAVING count(*) > 1)
        GROUP BY project ORDER BY n DESC, project""").fetchall()
    counts = {"names": scratch.execute("SELECT count(*) FROM idx.units").fetchone()[0],
              "projects": scratch.execute("SELECT count(*) FROM projects").fetchone()[0],
              "ambiguous_names": sum(n for _, n in ambiguous),
              "ambiguous_by_project": dict(ambiguous[:AMBIGUOUS_LISTED])}
    scratch.execute("DETACH DATABASE idx")
    scratch.close()
    scratch_path.unlink()
    commit(tmp, index_path)
    return counts


def _view_digests(db: sqlite3.Connection) -> None:
    """Fill idx.projects.view: a digest of everything a project's docs can depend on besides the settings. A file
    resolves names in its project and the projects whose headers it includes; what it pulls in resolves names the
    same way from its own file, so a project's view is the closure of that relation over projects. The digest
    covers, in input order, every file of the closure: its project, path, content digest and the projects it sees.
    Left NULL when a file has no content digest (a run without a cache: nothing is reused)."""
    if db.execute("SELECT 1 FROM files WHERE digest IS NULL LIMIT 1").fetchone():
        return
    edges: dict[str, set[str]] = {}
    for project, dep in db.execute("SELECT DISTINCT f.project, d.project FROM deps d JOIN files f ON f.gid = d.gid"):
        edges.setdefault(project, set()).add(dep)
    db.execute("CREATE TEMP TABLE seen(gid INTEGER PRIMARY KEY, deps TEXT)")
    db.execute("INSERT INTO seen SELECT gid, group_concat(project, ',') FROM "
               "(SELECT gid, project FROM idx.deps ORDER BY gid, project) GROUP BY gid")
    db.execute("CREATE TEMP TABLE closure(project TEXT PRIMARY KEY) WITHOUT ROWID")
    for (name,) in db.execute("SELECT name FROM projects ORDER BY name").fetchall():
        members, todo = {name}, [name]
        while todo:
            for dep in edges.get(todo.pop(), ()):
                if dep not in members:
                    members.add(dep)
                    todo.append(dep)
        db.execute("DELETE FROM closure")
        db.executemany("INSERT INTO closure VALUES (?)", [(m,) for m in sorted(members)])
        h = hashlib.sha256()
        for row in db.execute("SELECT f.project, f.path, f.digest, coalesce(s.deps, '') FROM files f "
                              "JOIN closure c ON c.project = f.project LEFT JOIN seen s ON s.gid = f.gid ORDER BY f.gid"):
            h.update(("\t".join(row) + "\n").encode())
        db.execute("UPDATE idx.projects SET view = ? WHERE name = ?", (h.hexdigest(), name))
    db.execute("DROP TABLE closure")
    db.execute("DROP TABLE seen")


def _init_index(path: Path) -> Path:
    db = _fresh(path)
    db.executescript(INDEX_SCHEMA)
    db.commit()
    db.close()
    return path


class GlobalIndex:
    """Lookups an emitting process makes: what a file sees, definitions by name, their units and text
    (bounded caches)."""

    def __init__(self, path: str | os.PathLike):
        self.db = _connect(path, readonly=True)
        self._views: dict = {}
        self._defs: dict = {}
        self._resolved: dict = {}
        self._units: dict = {}
        self._derived: dict = {}

    @staticmethod
    def _cached(cache: dict, key, compute):
        found = cache.get(key, _MISSING)  # (one lookup: most calls are hits)
        if found is _MISSING:
            if len(cache) >= CACHE_ENTRIES:
                cache.clear()
            found = cache[key] = compute()
        return found

    def view(self, gid: int) -> tuple[str, tuple]:
        """(the file's project, the other projects whose headers it includes)."""
        def compute():
            row = self.db.execute("SELECT project FROM files WHERE gid = ?", (gid,)).fetchone()
            deps = self.db.execute("SELECT project FROM deps WHERE gid = ? ORDER BY project", (gid,)).fetchall()
            return (row[0] if row else None), tuple(p for (p,) in deps)
        return self._cached(self._views, gid, compute)

    def defs(self, project: str, kind: str, name: str) -> list[tuple]:
        """(gid, uid, qualification, owner) of every definition of `name` in `project`."""
        key = (project, kind, name)
        return self._cached(self._defs, key, lambda: self.db.execute(
            "SELECT gid, uid, chain, owner FROM defs WHERE project = ? AND kind = ? AND name = ?", key).fetchall())

    def derived(self, key, compute):
        """compute() once per key: what a chunker derives from a definition and these lookups alone (the edges of a
        unit every file that pulls it in asks for: modes.Chunker._derived)."""
        return self._cached(self._derived, key, compute)

    def resolve(self, kind: str, name: str, gid: int, qualifiers: tuple = (), context: tuple = ()):
        """The one definition (gid, uid) of `name` that file `gid` sees (see the module doc), or None.
        qualifiers: the use's scopes when always qualified; context: the classes the use sits in."""
        view = self._views.get(gid) or self.view(gid)  # (dict lookups first: most calls are hits)
        key = (view, kind, name, qualifiers, context)
        return self._cached(self._resolved, key, lambda: self._resolve(*key))

    def _resolve(self, view: tuple, kind: str, name: str, qualifiers: tuple, context: tuple):
        project, deps = view
        for tier in ((project,), deps):
            rows = [row for p in tier for row in self.defs(p, kind, name)]
            found = matching(rows, kind, qualifiers, context)
            if found:
                return found[0][:2] if len(found) == 1 else None
        return None

    def resolve_usr(self, usr: str, gid: int):
        """The definition (gid, uid) of `usr` that file `gid` sees, as `resolve` scopes names: in its project, else
        in the projects it includes; defined in two units there, the one in the file itself, else none."""
        project, deps = self.view(gid)
        key = ("usr", project, deps, usr, gid)
        return self._cached(self._resolved, key, lambda: self._resolve_usr(project, deps, usr, gid))

    def _resolve_usr(self, project: str, deps: tuple, usr: str, gid: int):
        for tier in ((project,), deps):
            found = [row for p in tier for row in self.db.execute(
                "SELECT gid, uid FROM usrs WHERE project = ? AND usr = ?", (p, usr)).fetchall()]
            if found:
                own = [row for row in found if row[0] == gid]
                return found[0] if len(found) == 1 else own[0] if len(own) == 1 else None
        return None

    def _load(self, ref):
        def compute():
            blob, text = self.db.execute("SELECT unit, text FROM units WHERE gid = ? AND uid = ?", ref).fetchone()
            return BARE_UNIT.decode(blob), text
        return self._cached(self._units, ref, compute)

    def unit(self, ref):
        return self._load(ref)[0]

    def text(self, ref) -> str:
        return self._load(ref)[1]


def matching(rows: list[tuple], kind: str, qualifiers: tuple, context: tuple) -> list[tuple]:
    """The definitions (gid, uid, qualification, owner) a use can mean (see the module doc)."""
    if qualifiers:
        named = [r for r in rows if set(qualifiers) & set(r[2].split("::"))]
        return named or [r for r in rows if not r[2]]
    return [r for r in rows if kind == "function" or not r[3] or r[3] in context]

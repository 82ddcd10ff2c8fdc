"""A project's license as an SPDX id, from the license files at its root, and the `--licenses` allow-list.

Detection compares each license file, whole, with the license texts that identify (pre-commit's file
identification library) vendors from choosealicense.com: the 35 licenses GitHub offers, which cover what C++
projects use (MIT, Apache-2.0, BSD-2/3-Clause, GPL, LGPL, MPL-2.0, BSL-1.0, Zlib, ISC, Unlicense, 0BSD, ...).
The rule is identify's (and licensee's): a file is license L when its text is within 5% edit distance (ukkonen's
bounded Levenshtein) of L's, copyright statements set aside. One thing differs: identify drops every line that
*starts* with "copyright", so the result depended on where a file's lines were wrapped (an MIT text whose line
begins "COPYRIGHT HOLDERS BE LIABLE" was not MIT); here only copyright statements (a line starting with
"Copyright" that carries a year, "(c)" or "©") are dropped, and whitespace and case are ignored. A file that
holds several licenses, a license with an added exception or a notice pointing elsewhere matches nothing
(NOASSERTION): being strict costs recall, never a wrong id. Apache-2.0 matches with or without its appendix.

Ids are current SPDX ids, as license-expression (the SPDX list it bundles, offline) canonicalizes them: a GPL
text alone reads "GPL-2.0-only" (what the deprecated bare "GPL-2.0" means to SPDX), LGPL 2.1 "LGPL-2.1-only".
Several license files with different licenses give "A AND B" (sorted); files that match nothing are passed over
when another matches; none matching gives "NOASSERTION". A dual license (LICENSE-MIT + LICENSE-APACHE, meant as
"MIT OR Apache-2.0") is also read as AND, which `allowed` treats conservatively: every part must be allowed.

Measured on the 359 license files of this repository's virtualenv: 0.07 ms per file (median; p90 0.8 ms, at most
6 ms; 64 ms once per process to load), 275 (77%) recognized, none differently from ScanCode. Against: spdx-matcher 0.1.4 (92%
recognized but 86 ms median, 1.4 s p90, 62 s for one file: backtracking regexes; both "-only" and "-or-later"
for a GPL text), scancode-toolkit-mini 32.5.0 (everything, ~2 ms a file, but 3.6 s to load its index in each
process, 730 MB installed, needs libmagic and fails to import with pluggy >= 1.6, which our lock pins), and
identify's own license_id (69%: the line-wrapping issue above).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

from nanodata.errors import NanodataError

NOASSERTION = "NOASSERTION"  # SPDX's word for "no license could be determined"

# The usual names of a project's license files (matched case-insensitively); `license_files` also takes other
# suffixes of these stems (LICENSE-MIT, COPYING.LESSER, LICENSE_1_0.txt, ...), but not source files.
LICENSE_FILE_NAMES = (
    "LICENSE", "LICENCE", "COPYING", "COPYRIGHT", "UNLICENSE",
    "LICENSE.txt", "LICENSE.md", "LICENSE.rst", "LICENCE.txt", "LICENCE.md", "COPYING.txt", "COPYING.md",
    "COPYRIGHT.txt", "COPYRIGHT.md", "COPYING.LIB", "COPYING.LESSER", "COPYING.LGPL", "COPYING.GPL",
    "LICENSE-MIT", "LICENSE-APACHE", "LICENSE.MIT", "LICENSE.APACHE", "LICENSE.BSD", "LICENSE_1_0.txt",
)
_LICENSE_NAME = re.compile(r"(?:licen[cs]e|copying|copyright|unlicense)(?:[-._][a-z0-9][a-z0-9._-]*)?", re.I)
_NOT_LICENSES = {  # suffixes of files that only look like license files: code, build and config files
    "c", "cc", "cpp", "cxx", "h", "hh", "hpp", "hxx", "inl", "ipp", "py", "sh", "js", "ts", "go", "rs", "java",
    "cmake", "in", "am", "ac", "mk", "bzl", "bazel", "json", "yml", "yaml", "toml", "xml", "cfg", "ini", "o",
}

MAX_EDIT_FRACTION = 0.05  # a file matches a license when at most 5% of it (in characters) differs
_COPYRIGHT_STATEMENT = re.compile(
    r"^[ \t*#/;-]*(?:copyright\b[^\n]*?(?:\(c\)|©|\b\d{4}\b|\[yyyy\]|\[year\]|<year>|\{yyyy\})|\(c\)[ \t]*\d{4}|©)[^\n]*$",
    re.I | re.M)
_RIGHTS_RESERVED = re.compile(r"all rights reserved\.?", re.I)
_WHITESPACE = re.compile(r"\s+")


def license_files(names: list[str]) -> list[str]:
    """Which of a project's root entries are license files (LICENSE, COPYING.LIB, licence.md, ...: see
    LICENSE_FILE_NAMES), case-insensitively, sorted; source and build files (license.h, COPYING.in) are not."""
    found = []
    for name in names:
        if _LICENSE_NAME.fullmatch(name) and name.rpartition(".")[2].lower() not in _NOT_LICENSES:
            found.append(name)
    return sorted(found, key=lambda name: (name.lower(), name))


def _normalize(text: str) -> str:
    text = _COPYRIGHT_STATEMENT.sub("", text)
    text = _RIGHTS_RESERVED.sub("", text)
    return _WHITESPACE.sub(" ", text).strip().lower()


@lru_cache(maxsize=1)
def _references() -> tuple[tuple[str, str], ...]:
    """(SPDX id, normalized text) of each license identify knows; Apache-2.0 also without its appendix."""
    from identify.vendor.licenses import LICENSES

    references = []
    for spdx, text in sorted(LICENSES):
        spdx = canonical_id(spdx)
        references.append((spdx, _normalize(text)))
        end = re.search(r"end of terms and conditions", text, re.I)
        if end and text[end.end():].strip():
            references.append((spdx, _normalize(text[:end.end()])))
    return tuple(references)


def match_license(text: str) -> str | None:
    """The SPDX id of the one license `text` is (within MAX_EDIT_FRACTION), else None."""
    import ukkonen

    norm = _normalize(text)
    if not norm:
        return None
    best, best_id = math.ceil(MAX_EDIT_FRACTION * len(norm)), None
    for spdx, reference in _references():
        if abs(len(reference) - len(norm)) >= best:
            continue  # the distance is at least the difference in length
        distance = ukkonen.distance(norm, reference, best)  # min(distance, best)
        if distance < best:
            best, best_id = distance, spdx
    return best_id


def detect_license(texts: list[str]) -> str:
    """The project's license from the texts of its license files: one SPDX id ("MIT"), "A AND B" for files with
    different licenses (sorted), "NOASSERTION" when no file matches a license. Deterministic."""
    found = {match_license(text) for text in texts} - {None}
    return " AND ".join(sorted(found)) if found else NOASSERTION


@lru_cache(maxsize=1)
def _licensing():
    from license_expression import get_spdx_licensing

    return get_spdx_licensing()


@lru_cache(maxsize=4096)
def canonical_id(license_id: str) -> str:
    """The current SPDX id for an id in any case or a deprecated one ("mit" -> "MIT", "GPL-2.0" ->
    "GPL-2.0-only"); NOASSERTION as is; an id SPDX does not know is returned unchanged."""
    if license_id.strip().upper() == NOASSERTION:
        return NOASSERTION
    try:
        symbols = _licensing().license_symbols(_licensing().parse(license_id, validate=True, strict=True))
    except Exception:  # license_expression raises its own ExpressionError, ParseError, or a plain error
        return license_id
    return symbols[0].key if len(symbols) == 1 else license_id


def parse_license_list(text: str | None) -> tuple[str, ...] | None:
    """`--licenses LIST`: comma-separated SPDX ids -> their canonical ids in the order given; "" or "all" -> None
    (keep every project). NOASSERTION may be listed (keeps projects whose license is not recognized). An id SPDX
    does not know is a one-line NanodataError naming it."""
    if text is None or text.strip().lower() in ("", "all"):
        return None
    wanted, unknown = [], []
    for part in (part.strip() for part in text.split(",")):
        if not part:
            continue
        license_id = canonical_id(part)
        if license_id != NOASSERTION and license_id not in _licensing().known_symbols:
            unknown.append(part)
        elif license_id not in wanted:
            wanted.append(license_id)
    if unknown:
        raise NanodataError(
            f"--licenses: not SPDX license ids: {', '.join(map(repr, unknown))} (give ids from spdx.org/licenses "
            f"separated by commas, e.g. MIT,Apache-2.0,BSD-3-Clause; NOASSERTION keeps projects with no recognized "
            f"license; 'all' keeps every project)")
    return tuple(wanted) or None


def allowed(license_id: str, allow: tuple[str, ...] | None) -> bool:
    """Whether a project with this license passes the allow-list: None allows every project; "A AND B" is allowed
    only if A and B both are; NOASSERTION only if it is listed. Ids compare canonically ("GPL-2.0" = "GPL-2.0-only")."""
    if allow is None:
        return True
    permitted = {canonical_id(item) for item in allow}
    return all(canonical_id(part.strip()) in permitted for part in license_id.split(" AND "))

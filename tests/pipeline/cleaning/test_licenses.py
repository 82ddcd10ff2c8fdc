"""nanodata.pipeline.cleaning.licenses: SPDX ids from real license texts, the allow-list and its flag."""

from pathlib import Path

import pytest

from nanodata.errors import NanodataError
from nanodata.pipeline.cleaning.licenses import (
    LICENSE_FILE_NAMES,
    NOASSERTION,
    allowed,
    canonical_id,
    detect_license,
    license_files,
    match_license,
    parse_license_list,
)

TEXTS = Path(__file__).parent / "license_texts"  # real license files (holders' names replaced); Apache-2.0 whole
COMMON = Path("/usr/share/common-licenses")  # Debian's copies of the long ones, where present


def text(name: str) -> str:
    return (TEXTS / f"{name}.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", ["MIT", "BSD-3-Clause", "Apache-2.0", "ISC", "Zlib", "BSL-1.0", "Unlicense"])
def test_real_license_files_give_their_spdx_id(name):
    assert detect_license([text(name)]) == name


@pytest.mark.parametrize("file, spdx", [
    ("GPL-2", "GPL-2.0-only"), ("GPL-3", "GPL-3.0-only"), ("LGPL-2.1", "LGPL-2.1-only"), ("MPL-2.0", "MPL-2.0"),
    ("Apache-2.0", "Apache-2.0"), ("BSD", "BSD-3-Clause"),
])
def test_debian_common_licenses(file, spdx):
    if not (COMMON / file).is_file():
        pytest.skip(f"no {COMMON / file} on this machine")
    assert detect_license([(COMMON / file).read_text(encoding="utf-8")]) == spdx


def test_matching_ignores_wrapping_case_copyright_lines_and_the_apache_appendix():
    mit = text("MIT")
    rewrapped = " ".join(mit.split()).replace(". ", ".\n")  # one sentence a line
    assert match_license(rewrapped) == "MIT"
    assert match_license(mit.upper()) == "MIT"
    assert match_license(mit.replace("Copyright (c) 2018 Jane Example",
                                     "Copyright © 2001-2024 The Example Project Authors\n(c) 2024 Someone Else")) == "MIT"
    apache = text("Apache-2.0")
    assert match_license(apache[:apache.index("END OF TERMS AND CONDITIONS") + 27]) == "Apache-2.0"


def test_what_is_not_exactly_one_known_license_is_noassertion():
    exception = ("\n--- Optional exception to the License ---\n\nAs an exception, if, as a result of your compiling "
                 "your source code, portions of this Software are embedded into a machine-executable object form of "
                 "such source code, you may redistribute such embedded portions in such object form without "
                 "including the above copyright and permission notices.\n")
    for not_one in ["", "   \n", "See the README.", text("MIT") + exception, text("MIT") + "\n" + text("Zlib"),
                    "Licensed under the Apache License, Version 2.0 (the \"License\"); see LICENSE-APACHE."]:
        assert match_license(not_one) is None
        assert detect_license([not_one]) == NOASSERTION
    assert detect_license([]) == NOASSERTION  # a project without license files


def test_several_license_files():
    assert detect_license([text("MIT"), text("Apache-2.0")]) == "Apache-2.0 AND MIT"
    assert detect_license([text("Apache-2.0"), text("MIT")]) == "Apache-2.0 AND MIT"  # order-free
    assert detect_license([text("MIT"), text("MIT").replace("2018", "2024")]) == "MIT"  # same license twice
    assert detect_license([text("Zlib"), "Jane Example <jane@example.org>\nJohn Example\n"]) == "Zlib"  # + AUTHORS-like


def test_license_files_among_a_projects_root_entries():
    root = ["src", "CMakeLists.txt", "README.md", "license.txt", "COPYING.LIB", "LICENSE-MIT", "LICENSE_1_0.txt",
            "Copying", "licence", "license.h", "COPYING.in", "LICENSES", "licensecheck.py", "NOTICE", "UNLICENSE"]
    assert license_files(root) == ["Copying", "COPYING.LIB", "licence", "LICENSE-MIT", "license.txt",
                                   "LICENSE_1_0.txt", "UNLICENSE"]  # sorted case-insensitively
    assert license_files(list(LICENSE_FILE_NAMES)) == sorted(LICENSE_FILE_NAMES, key=lambda n: (n.lower(), n))
    assert license_files([n.lower() for n in LICENSE_FILE_NAMES]) == sorted(n.lower() for n in LICENSE_FILE_NAMES)
    assert license_files([]) == []


def test_parse_license_list():
    assert parse_license_list("MIT,Apache-2.0, BSD-3-Clause") == ("MIT", "Apache-2.0", "BSD-3-Clause")
    assert parse_license_list("mit,gpl-2.0,GPL-2.0+,noassertion,MIT,") == (
        "MIT", "GPL-2.0-only", "GPL-2.0-or-later", "NOASSERTION")
    for keep_all in (None, "", " ", "all", "ALL", ","):
        assert parse_license_list(keep_all) is None


@pytest.mark.parametrize("flag, named", [
    ("MIT,Foo-1.0", "'Foo-1.0'"),
    ("MIT, Apache 2, BSD", "'Apache 2', 'BSD'"),
    ("MIT AND Zlib", "'MIT AND Zlib'"),
])
def test_parse_license_list_errors_are_one_line_naming_the_ids(flag, named):
    with pytest.raises(NanodataError) as info:
        parse_license_list(flag)
    message = str(info.value)
    assert message.startswith("--licenses: ") and named in message and "\n" not in message


def test_allowed():
    allow = parse_license_list("MIT,Apache-2.0,BSD-3-Clause,GPL-2.0")
    assert allowed("MIT", None) and allowed(NOASSERTION, None) and allowed("Apache-2.0 AND GPL-3.0-only", None)
    assert allowed("MIT", allow) and allowed("Apache-2.0 AND MIT", allow)
    assert not allowed("Apache-2.0 AND Zlib", allow)  # every part must be allowed
    assert not allowed("Zlib", allow)
    assert not allowed(NOASSERTION, allow)
    assert allowed(NOASSERTION, (*allow, NOASSERTION))
    assert allowed("GPL-2.0-only", allow) and allowed("GPL-2.0", allow)  # deprecated ids compare canonically
    assert not allowed("GPL-2.0-or-later", allow)
    assert allowed("mit", ("MIT",))


def test_detected_ids_are_current_spdx_ids():
    assert canonical_id("GPL-2.0") == "GPL-2.0-only" and canonical_id("LGPL-2.1") == "LGPL-2.1-only"
    assert canonical_id("apache-2.0") == "Apache-2.0" and canonical_id("noassertion") == NOASSERTION
    assert canonical_id("Foo-1.0") == "Foo-1.0"  # unknown: unchanged
    for name in ["MIT", "BSD-3-Clause", "Apache-2.0", "ISC", "Zlib", "BSL-1.0", "Unlicense"]:
        assert parse_license_list(detect_license([text(name)])) == (name,)

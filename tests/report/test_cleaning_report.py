"""The report's Cleaning section: drops per reason with their figures, per project license and redactions, file
names escaped, nothing when the build has no record of cleaning."""

from nanodata.pipeline.cleaning.stages import Drop
from nanodata.pipeline.cleaning.tally import CleaningTally, summarize
from nanodata.report.page import CLEANING_EXAMPLES_SHOWN, cleaning_html

EVIL = "p/<script>alert(1)</script>.h"


def _cleaning() -> dict:
    a, b = CleaningTally(), CleaningTally()  # two partitions' tallies, summed as the report sums them
    a.drop("p", EVIL, 1500, Drop("generated", "a protoc header (line 1)"), "MIT")
    for i in range(30):
        b.drop("q", f"q/table{i}.h", 2_000_000, Drop("long-lines", f"a line of {1001 + i:,} characters (line 3)"),
               "Apache-2.0")
    a.kept("p", {"email": 3, "key": 1}, "MIT")
    b.kept("p", {"email": 2}, "MIT")
    return summarize([a.to_dict(), b.to_dict()])


def test_the_section_shows_reasons_projects_licenses_and_examples():
    cleaning = _cleaning()
    assert cleaning["files_dropped"] == 31 and cleaning["redactions"] == {"email": 5, "key": 1}
    assert cleaning["projects"]["p"]["files_kept"] == 2 and cleaning["projects"]["q"]["license"] == "Apache-2.0"
    html = cleaning_html(cleaning)
    assert "<h2>Cleaning</h2>" in html and "31 files dropped (60,001,500 bytes)" in html
    assert "email 5, key 1" in html and "<td>Apache-2.0</td>" in html and "<td>MIT</td>" in html
    assert "long-lines 30 (60,000,000 bytes)" in html
    assert html.count("characters (line 3)") == CLEANING_EXAMPLES_SHOWN  # 20 of the 30, each with its figure
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_no_section_without_a_record():
    assert cleaning_html(None) == ""

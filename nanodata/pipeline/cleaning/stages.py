"""The slot where a file's text is judged and changed before it is chunked: filters, then transforms.

A *filter* looks at a file (its source name and text) and either keeps it (None) or drops it with a `Drop`:
the reason (its filter's name) and the figure that decided it, named in the run's summary. A *transform*
rewrites the text (redaction: secrets, emails, IP addresses replaced by placeholders) and counts what it
changed by kind. The chunk step runs every filter, then every transform, on each file's text in the worker
that reads it, so the budget is counted on the text as it will be trained on. This is how torchtitan's
pre-filters and datatrove's filter and formatter steps work: small objects, each one concern, held by the
run's config (ChunkConfig.cleaning) and sent to the workers whole (they must pickle).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from nanodata.errors import NanodataError


@dataclass(frozen=True)
class Drop:
    reason: str       # the filter's name: "generated", "long-lines", "alpha", "encoded", "decontaminated", ...
    figure: str       # what decided it, in words: "a line of 1,532 characters (line 12)", "23.1% alphabetic"
    item: str = ""    # what it matched, when a filter matches named things (a benchmark item's id)


class FileFilter:
    """keep(source, text) -> None to keep the file, or the Drop that removes it (and all its docs)."""
    name: str = ""

    def keep(self, source: str, text: str) -> Drop | None:
        raise NotImplementedError


class TextTransform:
    """apply(text) -> (the new text, how many changes of each kind it made)."""
    name: str = ""

    def apply(self, text: str) -> tuple[str, Counter]:
        raise NotImplementedError


@dataclass(frozen=True)
class Cleaning:
    """The run's filters (in order: the first that drops a file names the reason) and transforms (in order)."""
    filters: tuple[FileFilter, ...] = ()
    transforms: tuple[TextTransform, ...] = ()

    def clean(self, source: str, text: str) -> tuple[str | None, Drop | None, Counter]:
        """(cleaned text, None, changes by kind) for a kept file, (None, its Drop, {}) for a dropped one."""
        for stage in self.filters:
            drop = stage.keep(source, text)
            if drop is not None:
                return None, drop, Counter()
        changes: Counter = Counter()
        for stage in self.transforms:
            text, counts = stage.apply(text)
            changes.update(counts)
        return text, None, changes


def parse_names(text: str, flag: str, names: tuple[str, ...], what: str) -> tuple[str, ...]:
    """A comma list of stage names as a flag or Param gives it: "none" for none, "all" or "" for all, else the names
    (in `names`' order, each once); one line naming the flag and the choices for anything else."""
    choices = f"choose from {', '.join(names)}, or none"
    items = [item for item in (part.strip().lower() for part in (text or "").split(",")) if item]
    if items == ["none"]:
        return ()
    for item in items:
        if item == "none":
            raise NanodataError(f"{flag} {text!r}: 'none' cannot be combined with other {what}s; {choices}")
        if item != "all" and item not in names:
            raise NanodataError(f"{flag} {item!r}: unknown {what}; {choices}")
    if not items or "all" in items:
        return names
    return tuple(n for n in names if n in items)

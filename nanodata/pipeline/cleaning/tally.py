"""What cleaning did to a run, as its summary and the build report show it: files dropped per reason (each named,
with the figure that decided it, up to LISTED per reason), per project the drops, the redactions by kind and the
license, and the benchmark items that matched. Never a secret: redactions are counted, not kept."""

from __future__ import annotations

from collections import Counter

from nanodata.pipeline.cleaning.stages import Drop

LISTED = 10_000  # dropped files named per reason in a summary (each reason's count is always whole)


class CleaningTally:
    def __init__(self):
        self.dropped: dict[str, dict] = {}    # reason -> {"files", "bytes", "listed": [{"file", "figure"}]}
        self.projects: dict[str, dict] = {}   # project -> {"license", "files_kept", "dropped": {reason: [files, bytes]},
        #                                                  "redactions": {kind: n}}
        self.items: Counter = Counter()       # decontamination: benchmark item -> files holding it

    def _project(self, project: str, license: str) -> dict:
        entry = self.projects.setdefault(project, {"license": license, "files_kept": 0, "dropped": {},
                                                   "redactions": {}})
        entry["license"] = _both(entry["license"], license)
        return entry

    def drop(self, project: str, source: str, size: int, drop: Drop, license: str) -> None:
        reason = self.dropped.setdefault(drop.reason, {"files": 0, "bytes": 0, "listed": []})
        reason["files"] += 1
        reason["bytes"] += size
        if len(reason["listed"]) < LISTED:
            reason["listed"].append({"file": source, "figure": drop.figure, **({"item": drop.item} if drop.item else {})})
        counts = self._project(project, license)["dropped"].setdefault(drop.reason, [0, 0])
        counts[0] += 1
        counts[1] += size
        if drop.item:
            self.items[drop.item] += 1

    def kept(self, project: str, redactions: Counter | None, license: str) -> None:
        entry = self._project(project, license)
        entry["files_kept"] += 1
        for kind, n in (redactions or {}).items():
            entry["redactions"][kind] = entry["redactions"].get(kind, 0) + n

    def to_dict(self) -> dict:
        return summarize([{"dropped": self.dropped, "projects": self.projects, "items": dict(self.items)}])


def _both(a: str, b: str) -> str:
    """One project's license as two sources give it (JSONL records of one repo may say different things)."""
    return a if a == b else " AND ".join(sorted(set(a.split(" AND ")) | set(b.split(" AND "))))


def summarize(parts: list[dict]) -> dict:
    """Per-partition cleaning records (CleaningTally.to_dict or their sums) summed, in the order given."""
    dropped: dict[str, dict] = {}
    projects: dict[str, dict] = {}
    items: Counter = Counter()
    for part in parts:
        for reason, counts in part.get("dropped", {}).items():
            into = dropped.setdefault(reason, {"files": 0, "bytes": 0, "listed": []})
            into["files"] += counts["files"]
            into["bytes"] += counts["bytes"]
            into["listed"].extend(counts["listed"][:LISTED - len(into["listed"])])
        for project, entry in part.get("projects", {}).items():
            into = projects.setdefault(project, {"license": entry["license"], "files_kept": 0, "dropped": {},
                                                 "redactions": {}})
            into["license"] = _both(into["license"], entry["license"])
            into["files_kept"] += entry["files_kept"]
            for reason, (files, size) in entry["dropped"].items():
                counts = into["dropped"].setdefault(reason, [0, 0])
                counts[0] += files
                counts[1] += size
            for kind, n in entry["redactions"].items():
                into["redactions"][kind] = into["redactions"].get(kind, 0) + n
        items.update(part.get("items", {}))
    redactions: Counter = Counter()
    for entry in projects.values():
        redactions.update(entry["redactions"])
    return {"files_dropped": sum(c["files"] for c in dropped.values()),
            "bytes_dropped": sum(c["bytes"] for c in dropped.values()),
            "dropped": dict(sorted(dropped.items())), "redactions": dict(sorted(redactions.items())),
            "projects": dict(sorted(projects.items())), "items": dict(sorted(items.items()))}

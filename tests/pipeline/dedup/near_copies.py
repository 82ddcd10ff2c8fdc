"""Real C++ text (libstdc++'s headers) and planted near-copies of it at a Jaccard similarity the tests compute.

The reference shingling is BigCode's, written plainly: lowercase, split on `\\W+`, drop empty strings, the set
of 5-grams of the tokens. Mutations are seeded (random.Random(seed)): the same copies on every run.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

STD_HEADERS = Path("/usr/include/c++/12/bits")
MUTATION = "zq"  # planted tokens start with this: no libstdc++ word does


def headers(low: int, high: int) -> list[Path]:
    """The headers whose size lies in [low, high) bytes, in name order."""
    return [p for p in sorted(STD_HEADERS.iterdir()) if p.is_file() and low <= p.stat().st_size < high]


def tokens(text: str) -> list[str]:
    return [t for t in re.split(r"\W+", text.lower()) if t]


def shingles(text: str) -> set[tuple[str, ...]]:
    """BigCode's shingle set: the distinct 5-grams of the text's tokens."""
    words = tokens(text)
    return {tuple(words[i:i + 5]) for i in range(len(words) - 4)}


def exact_jaccard(a: str | set, b: str | set) -> float:
    sa = shingles(a) if isinstance(a, str) else a
    sb = shingles(b) if isinstance(b, str) else b
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


def rate_for(target: float) -> float:
    """The share of tokens to replace for a Jaccard near `target`: a replaced token spoils its 5 shingles, so
    a share s of shingles kept gives J = s / (2 - s), s = (1 - rate) ** 5."""
    kept = 2 * target / (1 + target)
    return 1 - kept ** (1 / 5)


def mutate_tokens(text: str, rate: float, seed: int) -> str:
    """Each word token replaced, with probability `rate`, by a new word never seen elsewhere."""
    rng = random.Random(seed)
    count = 0

    def swap(match: re.Match) -> str:
        nonlocal count
        if rng.random() >= rate:
            return match.group(0)
        count += 1
        return f"{MUTATION}{seed}_{count}"

    return re.sub(r"\w+", swap, text)


def mutate_lines(text: str, rate: float, seed: int) -> str:
    """Each line, with probability `rate`, dropped or replaced by a new comment (a coin toss decides)."""
    rng = random.Random(seed)
    out = []
    for number, line in enumerate(text.splitlines(keepends=True)):
        if rng.random() >= rate:
            out.append(line)
        elif rng.random() < 0.5:
            out.append(f"// {MUTATION}{seed}_{number} {MUTATION}{seed}_{number}b changed\n")
    return "".join(out)


def planted(text: str, target: float, seed: int, low: float, high: float, lines: bool = False,
            tries: int = 40) -> tuple[str, float]:
    """A copy of text, token-mutated (or line-mutated), whose exact Jaccard with it lies in [low, high] (the rate
    nudged, seeds tried in turn); returns (copy, its exact Jaccard)."""
    base = shingles(text)
    rate = (1 - target) / 2.5 if lines else rate_for(target)
    for attempt in range(tries):
        mutate = mutate_lines if lines else mutate_tokens
        copy = mutate(text, min(rate, 1.0), seed * 1000 + attempt)
        j = exact_jaccard(base, shingles(copy))
        if low <= j <= high:
            return copy, j
        rate *= 1.15 if j > high else 1 / 1.15
    raise AssertionError(f"no copy at Jaccard in [{low}, {high}] (last {j:.3f})")


def distinct_headers(count: int, low: int, high: int, max_jaccard: float = 0.35) -> list[Path]:
    """`count` headers of [low, high) bytes, in name order, no two more alike than max_jaccard (exact)."""
    chosen: list[tuple[Path, set]] = []
    for path in headers(low, high):
        own = shingles(path.read_text())
        if all(exact_jaccard(own, other) <= max_jaccard for _, other in chosen):
            chosen.append((path, own))
            if len(chosen) == count:
                return [p for p, _ in chosen]
    raise AssertionError(f"only {len(chosen)} distinct headers of {low}..{high} bytes")


def read_docs(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]

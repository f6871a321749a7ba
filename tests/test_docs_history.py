"""The user's guide and the reference docs state what envad does today, once: no commit
hashes, dated re-runs or numbered "rounds" (history lives in git and in
docs/results/log.md), and the summaries stay short."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_DOCS = ["api", "backfill", "client", "detectors", "evaluation", "model-format",
                  "reliability", "retraining", "ray", "scaling", "training"]
GUIDES = ["README.md"] + [f"docs/{name}.md" for name in REFERENCE_DOCS]
LIMITS = {"README.md": 250, "docs/RESULTS.md": 400, "docs/benchmarks.md": 300}

#: a commit-hash-like word: 7 to 40 hex characters with at least one digit and one
#: letter a-f (so neither a number nor a word such as "deface"); a full sha256 (64 hex
#: characters) is a content id, not a commit, and is not matched, nor is an example id
#: cut short with "..." (`envad label --normal 3f1a9c0e...`)
COMMIT = re.compile(r"(?<![\w/.-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}"
                    r"(?![\w-]|\.\.\.|…)")
#: an ISO date, such as a re-run's "on 2026-11-27"
DATE = re.compile(r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b")
_ORDINAL = (r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|"
            r"eleventh|twelfth|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|"
            r"eighteenth|nineteenth|twentieth|twenty-\w+|thirtieth|thirty-\w+|\d+(?:st|nd|rd|th))")
#: "round" as a re-run label: "Twenty-second round", "the seventh round's", "round 12"
ROUND = re.compile(rf"\b{_ORDINAL}\s+rounds?\b|(?<![-\w])rounds?\s+\d+\b", re.I)


def history(text: str) -> list[str]:
    """Every commit-hash-like token, ISO date and numbered round in `text`."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for pattern in (COMMIT, DATE, ROUND):
            found += [f"line {n}: {m.group(0)!r}" for m in pattern.finditer(line)]
    return found


@pytest.mark.parametrize("path", GUIDES)
def test_guides_hold_no_history(path):
    assert history((ROOT / path).read_text()) == [], path


@pytest.mark.parametrize("path", sorted(LIMITS))
def test_summaries_stay_short(path):
    lines = len((ROOT / path).read_text().splitlines())
    assert lines <= LIMITS[path], f"{path}: {lines} lines, at most {LIMITS[path]}"


def test_the_rules_catch_what_they_are_for():
    assert history("commit 48555d6 and cf9566c, then 91e2782 to cfcae5b")
    assert history("last run on an H100 on 2026-11-27: 11 passed")
    assert history("Twenty-second round (all nine)") and history("the seventh round's")
    assert history("(docs/RESULTS.md, seventh round)")
    assert not history("sha256 " + "ab12" * 16)                 # a content id, 64 hex
    assert not history("envad label --normal 3f1a9c0e... 77b2d4aa...")  # example ids
    assert history("at commit 3a55d90.") and history("(commit fdf0a6d, 931 s)")
    assert not history("0.886 pooled, 4,352 images, a decade, 1e-3, lr 3e-4, 2-4 minutes")
    assert not history("round-robin over 2 rounds; best of 5 rounds; rounded; --rounds 5")
    assert not history("`--hparam warmup_fraction=0.05`, ids like dep12/m345, cafe, deface")

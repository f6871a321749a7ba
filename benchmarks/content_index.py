"""Memory of the backfill's content index (client/content_index.py) per million stored
rows: rows stored under their sha256 (image trees) and under short named ids (Camtrap DP
`deploymentID/mediaID`), against the plain reference measured in the same run (a dict
from the full sha256 hex string to the row id). Measured with tracemalloc.

    python -m benchmarks.content_index [--rows 1000000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tracemalloc

from envad.client.content_index import ContentIndex


def measure(rows: int, named: bool, plain: bool = False) -> float:
    """MB held by an index of `rows` rows (the id strings it keeps included); `plain`:
    the reference dict instead of ContentIndex."""
    tracemalloc.start()
    index = ContentIndex()
    reference: dict[str, str] = {}
    for n in range(rows):
        sha = hashlib.sha256(str(n).encode()).hexdigest()
        row_id = f"dep{n % 500}/m{n}" if named else sha
        if plain:
            reference[sha] = row_id
        else:
            index.add(sha, row_id)
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return used / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    scale = 1_000_000 / args.rows
    for named in (False, True):
        mb = measure(args.rows, named)
        reference = measure(args.rows, named, plain=True)
        print(json.dumps({"benchmark": "content_index", "ids": "named" if named else "sha256",
                          "rows": args.rows, "mb": round(mb, 1),
                          "mb_per_million_rows": round(mb * scale, 1),
                          "reference_mb": round(reference, 1),
                          "ratio_to_reference": round(mb / reference, 2)}))


if __name__ == "__main__":
    main()

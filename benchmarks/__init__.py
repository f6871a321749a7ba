"""Speed benchmarks: each prints one JSON line per measurement (ratios measured in one run)."""

"""A local Ray of 2 CPUs for the Ray backfill tests: the backfill connects to it (as to a
user's cluster) instead of starting its own."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def local_ray_cluster() -> Iterator[None]:
    """Ray started in this process (2 CPUs, no dashboard, no usage report) and shut down
    on leaving."""
    import ray  # the ray extra: only the tests that run Ray import it (importorskip)

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()

"""A progress line on stderr for one long call whose progress cannot be measured
(`Fit`: one RPC that runs for seconds to minutes): elapsed time, ticking while waiting."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")
TICK_S = 0.5


def wait_with_progress(call: Callable[[], T], desc: str, *, enabled: bool = True) -> T:
    """Run `call()` in a worker thread and return its result (or raise its exception),
    showing `desc` and the elapsed time on stderr meanwhile when `enabled`."""
    if not enabled:
        return call()

    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:      # re-raised in the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=run, name=f"{desc}-call", daemon=True)
    with tqdm(desc=desc, file=sys.stderr, bar_format="{desc}: {elapsed} elapsed{postfix}",
              mininterval=TICK_S) as bar:
        worker.start()
        while worker.is_alive():
            worker.join(TICK_S)
            bar.update(0)
            bar.refresh()
        bar.set_postfix_str("done" if "error" not in outcome else "failed")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]

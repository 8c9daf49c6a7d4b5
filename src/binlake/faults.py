"""Named fault points for the fault-injection suite.

``point("snapshot.before_manifest")`` kills the process with SIGKILL when the environment
variable ``BINLAKE_KILL_AT`` names that point (optionally ``name@N``: on its N-th visit).
Random-instant kills cover everything between the points; the named ones make sure the
narrow windows (between a Delta commit and the next step) are hit on every run.
Costs one dict lookup when unset.
"""

from __future__ import annotations

import os
import signal

_visits: dict[str, int] = {}


def point(name: str) -> None:
    target = os.environ.get("BINLAKE_KILL_AT")
    if not target:
        return
    wanted, _, nth = target.partition("@")
    if wanted != name:
        return
    _visits[name] = _visits.get(name, 0) + 1
    if _visits[name] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)

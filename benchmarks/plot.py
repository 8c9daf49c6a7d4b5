"""Draw one or more figures of ``benchmarks/history.csv`` over time.

    python -m benchmarks.plot snapshot_rows_per_s capture_rows_per_s [--out figures.png]

One line per figure (its value, and its peer's value dashed where there is one), one point
per row of the history, in file order; the x axis is the date and commit measured.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

HISTORY = Path(__file__).resolve().parent / "history.csv"


def read_history(path: Path = HISTORY) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.plot")
    ap.add_argument("names", nargs="+", help="figure names, e.g. snapshot_rows_per_s")
    ap.add_argument("--out", default="benchmark-history.png", help="image to write (default: %(default)s)")
    ns = ap.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_history()
    fig, axes = plt.subplots(len(ns.names), 1, figsize=(10, 3 * len(ns.names)), squeeze=False)
    for ax, name in zip(axes[:, 0], ns.names):
        mine = [r for r in rows if r["name"] == name]
        if not mine:
            print(f"no rows named {name!r} in {HISTORY}", file=sys.stderr)
            return 2
        labels = [f"{r['date']}\n{r['commit']}" for r in mine]
        ax.plot(labels, [float(r["value"]) for r in mine], marker="o", label=name)
        peers = [(label, float(r["peer_value"])) for label, r in zip(labels, mine) if r["peer_value"]]
        if peers:
            ax.plot(*zip(*peers), linestyle="--", marker=".", label="peer / goal")
        ax.set_ylabel(mine[-1]["unit"])
        ax.legend(loc="best")
        ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(ns.out)
    print(f"written to {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

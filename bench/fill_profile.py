"""Where the frozen-prefix cache's fill goes, against the inference pass it stands for: one O1 run of
``bench/o1_speedup.py``'s workload with ``configs/O1.json`` and its cache on (the ``O1-cache`` arm), every segment
run of the cache timed.

    python bench/fill_profile.py [--workload launch|compute] [--epochs 12]

Printed per cached segment: its calls, the first call (its compile; seconds and rows) and the other calls (seconds,
rows in all, mean rows a call: a batch's rows that are not cached at that level yet); the cache's per-step validity
checks; and the reference pass (``o1_speedup.fill_reference``: the deepest cached prefix as one graph over the same
samples in full batches) with its compile. A profile of one run, not a comparison: no ratio target is checked here.
"""
import argparse
import sys
import time

import numpy as np

import mindspore as ms
import o1_speedup as speedup  # puts the repository root on sys.path, for boost_cells below

from boost_cells.freezing.host.prefix_cache import FrozenPrefixCache  # pylint: disable=wrong-import-order


class SegmentTimer:
    """Wraps ``FrozenPrefixCache``'s segment runner and validity check, recording (seconds, rows) per call of each
    segment and the seconds of each check."""

    def __init__(self):
        self.runs, self.checks = {}, []
        # the plain function behind the staticmethod, and the method
        self.run, self.check = FrozenPrefixCache.__dict__["_run"].__func__, FrozenPrefixCache._check_prefix

    def install(self):
        timer = self

        def timed_run(segment, rows):
            start = time.perf_counter()
            out = timer.run(segment, rows)
            timer.runs.setdefault(id(segment), []).append((time.perf_counter() - start, len(rows)))
            return out

        def timed_check(cache, level):
            start = time.perf_counter()
            timer.check(cache, level)
            timer.checks.append(time.perf_counter() - start)

        FrozenPrefixCache._run = staticmethod(timed_run)
        FrozenPrefixCache._check_prefix = timed_check

    def report(self):
        lines = []
        for index, calls in enumerate(self.runs.values()):
            seconds, rows = np.array(calls).T
            lines.append(f"segment {index}: {len(calls)} calls; first (compile) {seconds[0]:.2f} s, {rows[0]:.0f} "
                         f"rows; the others {seconds[1:].sum():.2f} s over {rows[1:].sum():.0f} rows "
                         f"({rows[1:].mean():.1f} a call)")
        lines.append(f"validity checks: {len(self.checks)}, {sum(self.checks):.2f} s (not part of the fill; their read "
                     "waits for the device, so this includes the end of each step before)")
        return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--workload", choices=("launch", "compute"), default="launch")
    parser.add_argument("--epochs", type=int, default=12, help="epochs of the O1 run (default: 12)")
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    timer = SegmentTimer()
    timer.install()
    result = speedup.train_arm("O1-cache", args.workload, 0, args.epochs, speedup.workload_data(args.workload))
    print(f"bench/fill_profile.py: {args.workload}-bound, configs/O1.json with the cache on, {args.epochs} epochs; "
          f"cache fill {result['cache_fill']:.2f} s over {result.get('cache_samples', 0)} samples")
    print("\n".join(timer.report()))
    if "fill_pass" in result:
        print(f"reference pass: {result['fill_pass']:.2f} s, of which its compile {result['fill_pass_compile']:.2f} s; "
              f"fill / pass {result['cache_fill'] / result['fill_pass']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A level through a loop of one's own: ``examples/train.py --config configs/O1.json`` (its loop around
``build_train_network``, which tells the train cell its run with ``fit_to_run``) against the same command with
``configs/O0.json``, interleaved O0 O1 O1 O0 (ABBA), at each epoch count.

    python bench/own_loop.py [--epochs 12 24] [--rounds 2]

Every run is a fresh process (``python examples/train.py --config ... --epochs E --seed r``, round r's seed for both
arms), so compiles count as a user pays them; the script reads the example's own "total time" and "test
accuracy" lines. The network is the one the example picks for the config (the ResNet of width 8, one block a stage,
on the 8x8 digits: launch-bound), batch 32, stand-alone, GRAPH_MODE.
"""
import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(config, epochs, seed):
    """``(seconds, accuracy)`` of one run of the example, from its own report."""
    command = [sys.executable, os.path.join(ROOT, "examples", "train.py"), "--config",
               os.path.join("configs", f"{config}.json"), "--epochs", str(epochs), "--seed", str(seed),
               "--network", "resnet"]
    output = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True,
                            env={**os.environ, "GLOG_v": "3"}).stdout
    seconds = float(re.search(r"total time: ([0-9.]+)s", output).group(1))
    accuracy = float(re.search(r"test accuracy: ([0-9.]+)", output).group(1))
    return seconds, accuracy


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--epochs", type=int, nargs="+", default=[12, 24], help="epoch counts (default: 12 24)")
    parser.add_argument("--rounds", type=int, default=2, help="ABBA rounds per epoch count (default: 2)")
    args = parser.parse_args()
    for epochs in args.epochs:
        results = []
        for seed in range(args.rounds):
            for config in ("O0", "O1", "O1", "O0"):
                seconds, accuracy = run(config, epochs, seed)
                results.append({"config": config, "seed": seed, "seconds": seconds, "accuracy": accuracy})
                print(json.dumps({"epochs": epochs, **results[-1]}), flush=True)
        times = {c: [r["seconds"] for r in results if r["config"] == c] for c in ("O0", "O1")}
        points = {c: 100 * np.mean([r["accuracy"] for r in results if r["config"] == c]) for c in ("O0", "O1")}
        ratios = [o0 / o1 for o0, o1 in zip(times["O0"], times["O1"])]
        print(f"{epochs} epochs: O0 {np.median(times['O0']):.1f} s, O1 {np.median(times['O1']):.1f} s, "
              f"O1/O0 {np.median(ratios):.3f}x (pairs {' / '.join(f'{r:.2f}' for r in ratios)}); accuracy O0 "
              f"{points['O0']:.2f}%, O1 {points['O1']:.2f}% ({points['O1'] - points['O0']:+.2f} points)", flush=True)


if __name__ == "__main__":
    main()

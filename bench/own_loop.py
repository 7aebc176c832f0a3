"""A level through a loop of one's own: ``examples/train.py --config configs/O1.json`` (its loop around
``build_train_network``, which tells the train cell its run with ``fit_to_run``) against the same command with
``configs/O0.json``, interleaved O0 O1 O1 O0 (ABBA), at each epoch count.

    python bench/own_loop.py [--epochs 12 24] [--rounds 2] [--arm O1-earliest]

``--arm`` runs one of ``bench/o1_speedup.py``'s stand-alone arms in O1's place, written to a temporary config file
(``O1-earliest``: the file with the front frozen after 2% of the run, the bound of what its freezing can take).

Every run is a fresh process (``python examples/train.py --config ... --epochs E --seed r``, round r's seed for both
arms), so compiles count as a user pays them; the script reads the example's own "total time" and "test
accuracy" lines, and its "decision:" lines for what froze (``froze_levels``). The network is the one the example
picks for the config (the ResNet of width 8, one block a stage, on the 8x8 digits: launch-bound), batch 32,
stand-alone, GRAPH_MODE.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import results as result_files
from o1_speedup import boost_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def arm_config(arm, directory):
    """The config file of a stand-alone ``o1_speedup`` arm: the shipped file's path, else the arm's config written
    as JSON under ``directory``."""
    level, config = boost_config(arm)
    if isinstance(config, str) and config:
        return config
    path = os.path.join(directory, f"{arm}.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(config or {"level": level}, handle)
    return path


FROZE = re.compile(r"^decision: update (\d+)(?: of \d+)?: froze level (\d+):", re.MULTILINE)


def froze_levels(output):
    """``{level: update}`` from the example's ``output``: each level the run froze and the update after which it
    froze (a decision that froze several levels at once names the deepest; the levels under it froze with it); {}
    where nothing froze."""
    froze = {}
    for update, deepest in FROZE.findall(output):
        for level in range(1, int(deepest) + 1):
            froze.setdefault(level, int(update))
    return froze


def run(config, epochs, seed):
    """``(seconds, accuracy, froze)`` of one run of the example with the config file ``config``, from its own report
    (``froze``: ``froze_levels``)."""
    command = [sys.executable, os.path.join(ROOT, "examples", "train.py"), "--config", config, "--epochs",
               str(epochs), "--seed", str(seed), "--network", "resnet"]
    output = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True,
                            env={**os.environ, "GLOG_v": "3"}).stdout
    seconds = float(re.search(r"total time: ([0-9.]+)s", output).group(1))
    accuracy = float(re.search(r"test accuracy: ([0-9.]+)", output).group(1))
    return seconds, accuracy, froze_levels(output)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--epochs", type=int, nargs="+", default=[12, 24], help="epoch counts (default: 12 24)")
    parser.add_argument("--rounds", type=int, default=2, help="ABBA rounds per epoch count (default: 2)")
    parser.add_argument("--arm", default="O1", help="the arm against O0: O1 (configs/O1.json, the default) or another "
                        "of bench/o1_speedup.py's stand-alone arms, such as O1-earliest")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        configs = {arm: arm_config(arm, directory) for arm in ("O0", args.arm)}
        for epochs in args.epochs:
            compare(configs, args.arm, epochs, args.rounds)


def compare(configs, arm, epochs, rounds):
    """ABBA rounds of O0 and ``arm`` (``configs``: each one's config file) at ``epochs``; prints each run and the
    summary."""
    results = []
    for seed in range(rounds):
        for config in ("O0", arm, arm, "O0"):
            seconds, accuracy, froze = run(configs[config], epochs, seed)
            results.append({"config": config, "seed": seed, "seconds": seconds, "accuracy": accuracy,
                            "froze": froze})
            print(json.dumps({"epochs": epochs, **results[-1]}), flush=True)
    times = {c: [r["seconds"] for r in results if r["config"] == c] for c in ("O0", arm)}
    points = {c: 100 * np.mean([r["accuracy"] for r in results if r["config"] == c]) for c in ("O0", arm)}
    ratios = [o0 / boosted for o0, boosted in zip(times["O0"], times[arm])]
    print(f"{epochs} epochs: O0 {np.median(times['O0']):.1f} s, {arm} {np.median(times[arm]):.1f} s, "
          f"{arm}/O0 {np.median(ratios):.3f}x (pairs {' / '.join(f'{r:.2f}' for r in ratios)}); accuracy O0 "
          f"{points['O0']:.2f}%, {arm} {points[arm]:.2f}% ({points[arm] - points['O0']:+.2f} points)", flush=True)
    command = f"python bench/own_loop.py --epochs {epochs} --rounds {rounds} --arm {arm}"
    print("results: " + result_files.write(result_files.run_record(
        "bench/own_loop.py", command, ROOT, "own_loop", epochs, 1, seed_measures(results, arm), "O0", [arm])),
        flush=True)


def seed_measures(runs, arm):
    """The runs of each seed as a results file's rounds (``[{arm: measures}]``, seed r's at r): runs a second (a
    speed, so that a ratio is O0's seconds over the arm's, as the ABBA pairs' are), the mean accuracy of each arm's
    runs of the seed (a seed trains alike in both) and, where the runs give it (``froze``), what froze in its first
    run, as ``o1_speedup.py --abba`` keeps the first run's."""
    def of(seed, config, key):
        return float(np.mean([run[key] for run in runs if (run["seed"], run["config"]) == (seed, config)]))

    def measures(seed, config):
        first = next(run for run in runs if (run["seed"], run["config"]) == (seed, config))
        seen = {} if "froze" not in first else {"first_update_at_level": first["froze"]}
        return {"end_to_end": 1 / of(seed, config, "seconds"), "accuracy": of(seed, config, "accuracy"), **seen}

    seeds = sorted({run["seed"] for run in runs})
    return [{config: measures(seed, config) for config in ("O0", arm)} for seed in seeds]


if __name__ == "__main__":
    main()

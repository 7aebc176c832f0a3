"""Benchmark results as data: one JSON file per run under ``bench/results/``, written once and never rewritten.

A benchmark hands ``write`` what it measured; ``docs/benchmarks.md`` is rendered from these files
(``bench/render.py``) and the user pages' figures are checked against them (``tests/test_figures.py``), so nobody
types a benchmark figure by hand. A new measurement is a new file; a file never changes after it is written (``write``
refuses to overwrite one), except to set to null a field its benchmark wrote without measuring it.

A file holds one run of one workload (``SCHEMA``'s fields):

- ``benchmark``, ``command``, ``commit`` (``dirty`` when the work tree had changes), ``date`` (UTC, YYYY-MM-DD) and
  ``time`` (UTC, HH:MM:SS, when it was written; files written before it was recorded lack it);
- ``machine``: CPU model, core count, MindSpore's version; and its balance, ``balance``: the base arm's median step
  before anything froze (``o0_step_ms``) and its first step, the compile (``first_compile_s``), medians over seeds;
- ``workload``, ``epochs``, ``workers`` (1 stand-alone, else data-parallel under msrun);
- ``comparisons``: for each boosted arm against the base arm (``base``, ``arm`` as the benchmark names them, and
  ``level``: the name of the config the arm ran, as the results page groups rows), per seed: the ratio of images per
  second (arm over base), each arm's held-out accuracy (%) and test loss, their changes (arm less base; accuracy in
  points), the balance of that seed's base arm, where each level froze (``{level: first update at it}``; {} where
  nothing froze, null where the benchmark did not see), what the frozen-prefix cache did, the train cell's decision
  records (``cell.decisions``, each ``to_dict()``; empty where the cell keeps none, null where the benchmark did not
  read them), each arm's median step before anything froze, compiles, time outside the steps and the
  route's own work a call (``steps``), and with ``--abba`` each arm's two runs' own speed, accuracy and test loss
  (``runs``; null otherwise). Files written before ``steps``, ``runs`` and the route's work were recorded lack them.

Files transcribed from the benchmarks record, written before this module existed, carry ``provenance`` and may give
``reported``: the summary figures of a comparison as the record printed them, where it gave no per-seed figure (a
field the record lacks is null, never estimated). ``summary`` reads a comparison either way.
"""
import datetime
import json
import os
import platform
import re
import subprocess

import numpy as np

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
SCHEMA = 1
REQUIRED = ("schema", "benchmark", "command", "commit", "date", "machine", "balance", "workload", "epochs",
            "workers", "comparisons")


def cpu_model():
    """The CPU's model name (``/proc/cpuinfo``; ``platform.processor()`` elsewhere), or None."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine():
    """The machine a run measures: CPU model, cores, MindSpore's version."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "mindspore": ms.__version__}


def commit(root):
    """``(commit id, dirty)`` of the repository at ``root`` (short id; dirty when tracked files changed), or
    ``(None, None)`` outside a git work tree."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None, None
    return head, bool(status.strip())


def held_out_loss(logits, labels):
    """The mean softmax cross-entropy of ``logits`` (rows) against integer ``labels``: the test loss."""
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-log_softmax[np.arange(len(labels)), np.asarray(labels)].mean())


def decisions(train_cell):
    """The train cell's decision records as dicts (``cell.decisions``, each with ``to_dict()``); [] where it keeps
    none."""
    return [record.to_dict() for record in getattr(train_cell, "decisions", None) or ()]


def _median(values):
    values = [value for value in values if value is not None]
    return float(np.median(values)) if values else None


def _change(arm, base):
    return None if arm is None or base is None else arm - base


def seed_record(seed, base, arm):
    """One seed of a comparison from the benchmark's measures of its two arms (``o1_speedup.train_arm``'s dicts: at
    least ``end_to_end``, images a second, and ``accuracy``; a measure a benchmark does not take is null, never empty:
    ``froze`` {} says that nothing froze, null that the benchmark did not see)."""
    accuracy = {"base": 100 * base["accuracy"], "arm": 100 * arm["accuracy"]}
    steps = {side: _step_figures(measures) for side, measures in (("base", base), ("arm", arm))}
    loss = {"base": base.get("test_loss"), "arm": arm.get("test_loss")}
    cache = {key: arm[key] for key in ("cache_hits", "cache_misses", "cache_received", "cache_aside") if key in arm}
    return {"seed": seed, "ratio": arm["end_to_end"] / base["end_to_end"],
            "accuracy": accuracy, "accuracy_change": _change(accuracy["arm"], accuracy["base"]),
            "test_loss": loss, "test_loss_change": _change(loss["arm"], loss["base"]),
            "balance": {"o0_step_ms": steps["base"]["median_step_ms"], "first_compile_s": base.get("first_step")},
            "froze": None if "first_update_at_level" not in arm else
            {str(level): update for level, update in arm["first_update_at_level"].items()},
            "cache": cache or None, "decisions": arm.get("decisions"),
            "steps": steps,
            "runs": {"base": base["runs"], "arm": arm["runs"]} if "runs" in base and "runs" in arm else None}


def _step_figures(measures):
    """Where one arm's time went: its median step before anything froze (ms), its compiles (s), its time outside
    the steps (s) and the frozen levels' route's own work a call beside its steps (ms, ``o1_speedup.RouteWork``);
    None where the benchmark does not take one (an arm without the route)."""
    step, route = measures.get("median_level0_step"), measures.get("route_work")
    return {"median_step_ms": None if step is None else 1e3 * step, "compiles_s": measures.get("compiles"),
            "outside_steps_s": measures.get("outside_steps"), "route_work_ms": None if route is None else 1e3 * route}


AVERAGED = ("accuracy", "test_loss", "train", "build", "outside_steps", "compiles", "first_step", "median_level0_step",
            "level0_steps", "frozen_steps", "cache_fill", "route_work")


def abba_measures(first, second):
    """One arm's two runs of a seed in an ABBA round (``o1_speedup.py --abba``: A B B A, so a machine whose speed
    drifts over the round weighs on both arms alike) as one measure: ``end_to_end`` over both runs' wall time (the
    harmonic mean of the two), the mean of each other figure both runs give (``AVERAGED``; None where either lacks
    it), the first run's decisions, freezing and cache (wall times decide, so the two runs may differ: both runs'
    speed and accuracy stay in ``runs``)."""
    merged = dict(first)
    merged["end_to_end"] = 2.0 / (1.0 / first["end_to_end"] + 1.0 / second["end_to_end"])
    for key in AVERAGED:
        if key in first or key in second:
            one, two = first.get(key), second.get(key)
            merged[key] = None if one is None or two is None else (one + two) / 2
    merged["runs"] = [{key: run.get(key) for key in ("end_to_end", "accuracy", "test_loss")} for run in (first, second)]
    return merged


def arm_measures(model, x_test, y_test):
    """What a results file needs of a trained arm beyond the benchmark's own measures: its test loss (its
    ``predict_network`` on the test split) and its train cell's decision records."""
    from mindspore import Tensor  # pylint: disable=import-outside-toplevel
    return {"test_loss": held_out_loss(model.predict_network(Tensor(x_test)).asnumpy(), y_test),
            "decisions": decisions(model.train_network)}


def seeds_balance(seeds):
    """The machine balance of a row of ``seeds`` (seed records): the medians of their base arms' level-0 step (ms)
    and first step, the compile (s); None where no seed measured one."""
    return {key: _median(seed["balance"][key] for seed in seeds) for key in ("o0_step_ms", "first_compile_s")}


def run_record(benchmark, command, root, workload, epochs, workers, rounds, base, arms, first_seed=0):
    """The record of one run: ``rounds`` (``[{arm: measures}]``, round r trained with seed ``first_seed + r``) of
    ``base`` against each of ``arms`` (each arm's ``level`` is its name: the results page groups rows by it)."""
    commit_id, dirty = commit(root)
    now = datetime.datetime.now(datetime.timezone.utc)
    comparisons = [{"base": base, "arm": arm, "level": arm,
                    "seeds": [seed_record(first_seed + index, measures[base], measures[arm])
                              for index, measures in enumerate(rounds)]} for arm in arms]
    balance = seeds_balance(comparisons[0]["seeds"] if comparisons else [])
    return {"schema": SCHEMA, "benchmark": benchmark, "command": command, "commit": commit_id, "dirty": dirty,
            "date": now.strftime("%Y-%m-%d"), "time": now.strftime("%H:%M:%S"), "machine": machine(),
            "balance": balance, "workload": workload, "epochs": epochs, "workers": workers,
            "comparisons": comparisons}


def file_name(record):
    """``<date>-<workload>[-<workers>w]-<commit>.json`` (``no-commit`` where none is known)."""
    workers = f"-{record['workers']}w" if record["workers"] > 1 else ""
    return f"{record['date']}-{record['workload']}{workers}-{record['commit'] or 'no-commit'}.json"


def write(record, directory=RESULTS_DIR):
    """Write ``record`` as a new file under ``directory`` (made if missing) and return its path. An existing file is
    never touched: a second run of the same day, workload and commit gets ``-2``, ``-3``, ... before ``.json``."""
    missing = [key for key in REQUIRED if key not in record]
    if missing:
        raise ValueError(f"For 'write', 'record' must have the fields {', '.join(REQUIRED)}, but lacks "
                         f"{', '.join(missing)}.")
    os.makedirs(directory, exist_ok=True)
    stem = file_name(record)[:-len(".json")]
    for count in range(1, 1000):
        path = os.path.join(directory, stem + ("" if count == 1 else f"-{count}") + ".json")
        try:
            with open(path, "x", encoding="utf-8") as handle:
                json.dump(record, handle, indent=1)
                handle.write("\n")
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"For 'write', 999 files named {stem}-*.json exist already under {directory}.")


def _written_order(name):
    """A file name's place in the order of writing within a day: ``x.json`` before ``x-2.json``, ``x-10.json``."""
    match = re.fullmatch(r"(.*?)(?:-(\d{1,3}))?\.json", name)
    return match.group(1), int(match.group(2) or 1)


def load(directory=RESULTS_DIR):
    """Every record under ``directory``, each with its file's name as ``file``, in file-name order (date first; a
    day's second run of a workload and commit after its first)."""
    records = []
    names = [name for name in os.listdir(directory) if name.endswith(".json")] if os.path.isdir(directory) else []
    for name in sorted(names, key=_written_order):
        with open(os.path.join(directory, name), encoding="utf-8") as handle:
            records.append({**json.load(handle), "file": name})
    return records


def _mean(values):
    values = [value for value in values if value is not None]
    return float(np.mean(values)) if values else None


def summary(comparison):
    """A comparison's figures: ``ratio`` (the median of the per-seed ratios), ``round_ratios``, ``accuracy`` (each
    arm's mean over seeds, %), ``accuracy_change`` and ``test_loss_change`` (means over seeds) and ``seeds``. A
    transcribed record's ``reported`` figures come first: they are the record's own, from unrounded measures, where
    its per-seed figures are rounded or missing. A figure neither gives is None."""
    seeds, reported = comparison["seeds"], comparison.get("reported", {})
    ratios = [seed["ratio"] for seed in seeds]
    accuracy = {side: _mean(seed["accuracy"][side] for seed in seeds) for side in ("base", "arm")}
    figures = {"ratio": _median(ratios) if None not in ratios else None,
               "round_ratios": ratios if None not in ratios else None,
               "accuracy": accuracy if None not in accuracy.values() else None,
               "accuracy_change": _mean(seed["accuracy_change"] for seed in seeds),
               "test_loss_change": _mean(seed["test_loss_change"] for seed in seeds)}
    figures.update({key: value for key, value in reported.items() if key in figures})
    return {"seeds": [seed["seed"] for seed in seeds], **figures}

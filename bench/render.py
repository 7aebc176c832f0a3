"""Render the results page, ``docs/benchmarks.md``, and the results tables of the user pages from ``bench/results/``.

    python bench/render.py            # rewrite the pages
    python bench/render.py --check    # exit 1 and name the pages that differ from what the files give

The page is the current results, not a log: one table a workload (level, baseline, speed-up with its rounds,
accuracy and test loss change, seeds, machine balance, date), what was not measured, how to reproduce a row, and
short method sections with no dated figure. A row is a comparison of a results file whose level the page names
(``LEVELS``); where a workload, level and baseline were measured several times, the latest file's rows on each machine
(CPU) stand (by date, then by the time a file was written, where it records one; a transcribed file, which records no
CPU, gives way to a later file of any), joined by the seeds that earlier files of the same commit, machine and epochs
measured and it did not (a run with ``--first-seed`` adds seeds to a row), and the older ones stay in their files
and in git. Nobody edits the page by hand: ``tests/test_figures.py`` renders it and fails when the committed page is
stale.

A user page quotes the same figures through a region the renderer owns, between ``<!-- results: NAME -->`` and
``<!-- /results -->`` (``REGIONS``: ``levels``, the levels against O0 on each workload, and ``parts``, a part switched
on against the file; each figure with its seeds and machine balance).
"""
import argparse
import os
import re
import statistics
import sys
import textwrap

import results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join("docs", "benchmarks.md")

# The levels the page shows, as a user names them; a results file's comparisons under other names (a variant tried
# and not shipped) stay in their files.
LEVELS = {"O1": "`configs/O1.json`", "O2": "`configs/O2.json`", "O1-bare": "`boost_level=\"O1\"`, no file",
          "O2-bare": "`boost_level=\"O2\"`, no file", "O1-cache": "`configs/O1.json`, `\"cache_frozen_prefix\": true`",
          "O1-lessbn": "`configs/O1.json`, `\"less_bn\": true`",
          "O1-lessbn-pass": "`configs/O1.json`, `\"less_bn\": true`, its pass alone (`fn_flag`, `gc_flag` false)",
          "O2-nopayback": "`configs/O2.json`, `\"payback\": false`"}
BASES = {"O0": "O0", "O1": "`configs/O1.json` of that date"}
WORKLOADS = {
    "launch": ("Launch-bound", "A ResNet of width 8 (8 stages, BatchNorm) on scikit-learn's 8x8 digits, batch 32, "
               "12 epochs: kernel launches and compiles weigh most. The `\"payback\": false` row is the O2 file with "
               "every level allowed from the start, beside the file's own run of the same seeds: what freezing buys "
               "there where payback's measured costs say no level pays (the decision records in its results file "
               "give each seed's figures)."),
    "tiny": ("Truly launch-bound", "A ResNet of width 4 with one block a stage (5 stages) on the 8x8 digits, batch 32, "
             "12 epochs: the shortest step of these workloads (O0's is the rows' machine balance), where a few host "
             "reads or kernels a step show. On these 2-core machines the step moves by up to a third between runs of "
             "one process, whatever the arm, so its rows run A B B A "
             "(`--abba`). `python bench/step_overhead.py` times what the route adds to a step where nothing freezes "
             "(its `O1 route` pair: `configs/O1.json`'s cell at level 0 against the O0 cell, called in a loop, in "
             "interleaved blocks of one process). The route's step is O0's graph with five kernels more, which count "
             "the updates and add the step's loss to the interval's sum where it is finite. The host's work a step is "
             "the ledger's clock, kept in a list, and a few integer comparisons; every half decision interval it "
             "weighs the levels (the ledger's medians, the policy, one read of the updates applied, the ledger and "
             "the policy's record written to their Parameters), and with the cache on \"auto\" the cache's probe "
             "hashes each batch of the first epoch and an eighth. `boost_level=\"O1\"` with no file is the "
             "reference's O1, LessBN with freezing over up to 10 groups. The `\"less_bn\": true` rows are the file "
             "with LessBN switched on and nothing else: on each machine it runs about as slowly as the bare level and "
             "ends every seed at the bare level's accuracy (nothing froze in either, so both trained the same network "
             "the same way): LessBN is what the bare level pays here. Its pass alone drops none of this network's "
             "BatchNorms under "
             "`Model`'s wrapping (docs/less-bn.md) and ends every seed at O0's accuracy: on one machine it ran at the "
             "file's speed, on the other slower, in a longer compile and longer steps though it removes nothing; the "
             "feature-normalised head and gradient centralization (one conv's weights of this network) add a little "
             "more, and nothing here freezes to pay for either. The file's own cost is about the same time every "
             "step, so the shorter the step, the larger its share: each row's machine balance gives the step it was "
             "measured at."),
    "compute": ("Compute-bound", "The same ResNet at width 16 on the digits upsampled to 16x16: convolutions "
                "dominate."),
    "heavy": ("Heavy", "The cheapest size from the compute-bound configuration up at which an O0 step takes at least "
              "0.5 s on the machine that runs it, or the largest where none does (`--workload heavy`; the run prints "
              "the size it took)."),
    "augment": ("Augmented", "Compute-bound, each training image shifted at random by up to 2 pixels every epoch, so "
                "samples do not repeat and the frozen-prefix cache cannot serve."),
    "finetune": ("Fine-tuning", "Compute-bound's network pretrained with O0 on the digits 0-4, fine-tuned on 5-9 for 8 "
                 "epochs with every layer trainable; 180 test images, one is 0.56 points."),
    "vit": ("Transformer", "A small pre-norm vision transformer (4x4 patches of the digits upsampled to 16x16, 16 tokens, "
            "width 64, 4 encoder layers, a mean-pooled head) trained with Adam from 1e-3, 10 epochs."),
    "vit-finetune": ("Transformer fine-tuning", "The transformer pretrained with O0 on the digits 0-4, fine-tuned on 5-9 "
                     "for 8 epochs with every layer trainable, Adam; 180 test images, one is 0.56 points."),
    "own_loop": ("The example's own loop", "`python examples/train.py --network resnet --config ...`, a loop of its "
                 "own around `build_train_network` (width 8, one block a stage), a fresh process a run "
                 "(`bench/own_loop.py`: O0 and the level ABBA on each seed; a transcribed row's rounds are its pairs)."),
}
WIDTH = 119  # the page's prose lines, as the hand-written pages keep them


def _prose(text, indent=""):
    """``text`` as lines of at most ``WIDTH`` columns (a list item's continuation indented under its text)."""
    return textwrap.wrap(text, WIDTH, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


NOT_MEASURED = ("GPU and Ascend (every figure here is from 2 CPU cores); mixed precision (`amp_level` O2, float16); "
                "dataset sink mode (on CPU MindSpore falls back to non-sink mode); more than 2 workers or several "
                "machines; a run of ImageNet's size.")


def _number(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def _signed(value, digits=2):
    """``value`` with its sign, and a change that rounds to zero as +0.00 (a mean of seeds that cancel, such as
    -1e-15, is no loss)."""
    if value is None:
        return "-"
    return f"{round(value, digits) or 0.0:+.{digits}f}"


def _seeds(seeds):
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def machine(record):
    """The CPU a results file was measured on, in short ("Intel Xeon", "AMD EPYC"), or None where the file records
    none (a transcribed one)."""
    cpu = (record.get("machine") or {}).get("cpu")
    if not cpu:
        return None
    return " ".join(word for word in cpu.replace("(R)", "").replace("(TM)", "").split()
                    if word not in ("Processor", "CPU"))


def _on_machine(record):
    """``", <CPU>"`` for a file that records its machine, else "" (to close a figure's brackets)."""
    cpu = machine(record)
    return "" if cpu is None else f", {cpu}"


def _balance(record):
    step, compile_seconds = record["balance"]["o0_step_ms"], record["balance"]["first_compile_s"]
    cpu = _on_machine(record)
    if step is None and compile_seconds is None:
        return "-" + cpu
    return f"{'-' if step is None else f'{step:,.0f} ms'}, {_number(compile_seconds)} s{cpu}"


def _speed_up(figures):
    rounds = figures["round_ratios"]
    per_round = f" ({' / '.join(f'{ratio:.2f}' for ratio in rounds)})" if rounds and len(rounds) > 1 else ""
    return f"{figures['ratio']:.2f}x{per_round}"


def rows(records):
    """``[(record, comparison, figures)]`` the page shows: comparisons of the ``LEVELS`` against a ``BASES`` arm,
    refusing a workload ``WORKLOADS`` does not describe (its rows would otherwise vanish from the page),
    each (workload, epochs, workers, base, level)'s latest only on each machine (``_written``, ``_row_key``; a file
    that records no machine, a transcribed one, gives way to a later file of any machine), with the seeds earlier
    files of its commit and machine add (``_pooled``); in ``LEVELS``' order, then stand-alone first, then by run length
    (epochs), then by date and file."""
    unknown = sorted({record["workload"] for record in records} - set(WORKLOADS))
    if unknown:
        raise ValueError(f"results files of the workload(s) {', '.join(unknown)}, which bench/render.py's WORKLOADS "
                         "does not describe: add each with its heading and one sentence on what it trains")
    shown = [(record, comparison) for record in records for comparison in record["comparisons"]
             if comparison["level"] in LEVELS and comparison["base"] in BASES]
    latest, newest = {}, {}  # the latest file of a row on its machine, and on any (the key without the machine)
    for record, comparison in shown:
        key, written = _row_key(record, comparison), _written(record)
        latest[key] = max(latest.get(key, ("", "")), written)
        newest[key[:-1]] = max(newest.get(key[:-1], ("", "")), written)

    def stands(record, comparison):
        key, written = _row_key(record, comparison), _written(record)
        return written == latest[key] and (key[-1] is not None or written == newest[key[:-1]])

    kept = [_pooled(record, comparison, shown) for record, comparison in shown if stands(record, comparison)]
    order = list(LEVELS)
    kept.sort(key=lambda row: (order.index(row[1]["level"]), row[0]["workers"], row[0]["epochs"],
                               row[0]["date"]))  # stable: file order
    return [(record, comparison, results.summary(comparison)) for record, comparison in kept]


def _row_key(record, comparison):
    """What a row stands for: a workload at a run length, its workers, a baseline and a level, on a machine (last:
    ``machine``, None for a transcribed file)."""
    return (record["workload"], record["epochs"], record["workers"], comparison["base"], comparison["level"],
            machine(record))


def _pooled(record, comparison, shown):
    """The row of ``comparison`` (of ``record``, the latest file of its ``_row_key`` on its machine) with the seeds of
    the earlier files of the same commit and machine that it lacks (a later run's ``--first-seed`` adds seeds to the
    row), and the machine balance their median; a seed run twice counts once, as the latest file that ran it gives
    it. A transcribed file, or one without a commit, stands alone."""
    if record.get("provenance") or not record["commit"]:
        return record, comparison
    seeds = {seed["seed"]: seed for seed in comparison["seeds"]}
    for other, earlier in sorted(shown, key=lambda row: _written(row[0]), reverse=True):
        if (other is record or other.get("provenance") or other["commit"] != record["commit"]
                or _written(other) > _written(record) or _row_key(other, earlier) != _row_key(record, comparison)):
            continue
        for seed in earlier["seeds"]:
            seeds.setdefault(seed["seed"], seed)
    if len(seeds) == len(comparison["seeds"]):
        return record, comparison
    pooled = [seeds[seed] for seed in sorted(seeds)]
    return {**record, "balance": results.seeds_balance(pooled)}, {**comparison, "seeds": pooled}


def _written(record):
    """When a file was written, as far as it says: ``(date, time)``, the time "" where it records none (so a day's
    files without one stand together, and any with one stands above them)."""
    return record["date"], record.get("time", "")


def _level(record, comparison):
    workers = f", {record['workers']} workers" if record["workers"] > 1 else ""
    return LEVELS[comparison["level"]] + workers


def _base(record, comparison):
    return "plain data-parallel O0" if record["workers"] > 1 and comparison["base"] == "O0" else \
        BASES[comparison["base"]]


def workload_table(shown, workload):
    """The markdown lines of one workload's table (none when it has no row)."""
    lines = []
    for record, comparison, figures in shown:
        if record["workload"] != workload:
            continue
        mark = " (transcribed)" if record.get("provenance") else ""
        lines.append(f"| {_level(record, comparison)} | {_base(record, comparison)} | {_speed_up(figures)} | "
                     f"{_signed(figures['accuracy_change'])} | {_signed(figures['test_loss_change'], 3)} | "
                     f"{_seeds(figures['seeds'])} ({record['epochs']} epochs) | {_balance(record)} | "
                     f"{record['date']}{mark} |")
    if not lines:
        return []
    name, what = WORKLOADS[workload]
    return [f"## {name}", "", *_prose(what), "",
            "| level | against | speed-up (per round) | accuracy change (points) | test loss change | seeds | "
            "machine balance: O0 step, compile, CPU | date |", "| --- | --- | --- | --- | --- | --- | --- | --- |",
            *lines, "", *froze_lines(shown, workload), *route_work_lines(shown, workload)]


def froze_lines(shown, workload):
    """The markdown lines that name the workload's rows whose seeds record what froze (``froze``: a level's first
    update) and in which no seed froze a level: every step of theirs trained every group, so their ratio is not
    freezing's (none where no row is such)."""
    parts = [f"{_level(record, comparison)} ({record['date']}{_on_machine(record)})"
             for record, comparison, _ in shown
             if record["workload"] == workload and all(seed.get("froze") == {} for seed in comparison["seeds"])]
    if not parts:
        return []
    return [*_prose("No seed froze a level in these rows, so every step trained every group and the ratio is not "
                    "freezing's: " + "; ".join(parts) + "."), ""]


def route_work(comparison):
    """The frozen levels' route's own work a call beside the steps it ran, in ms: the median over the seeds that
    measured it (``route_work_ms``, bench/o1_speedup.py's ``RouteWork``), or None where none did."""
    values = [seed["steps"]["arm"]["route_work_ms"] for seed in comparison["seeds"]
              if (seed.get("steps") or {}).get("arm", {}).get("route_work_ms") is not None]
    return statistics.median(values) if values else None


def route_work_lines(shown, workload):
    """The markdown lines that give, for each of the workload's rows whose file measured it, the route's own work a
    call against the row's O0 step (none where no row did)."""
    parts = []
    for record, comparison, _ in shown:
        work = route_work(comparison) if record["workload"] == workload else None
        if work is not None:
            step = record["balance"]["o0_step_ms"]
            parts.append(f"{_level(record, comparison)}, {work:.3f} ms a call against an O0 step of "
                         f"{'-' if step is None else f'{step:,.1f}'} ms ({record['date']}{_on_machine(record)})")
    if not parts:
        return []
    return [*_prose("The frozen levels' route's own work beside the steps it runs (`RouteWork` in "
                    "bench/o1_speedup.py: each call less the step it ran, from the second call on, a call's mean over "
                    "the run; the median over the row's seeds): " + "; ".join(parts) + "."), ""]


def not_measured(shown):
    """What no row measured: the platforms and modes, then each level's workloads without a row."""
    measured = {(record["workload"], comparison["level"]) for record, comparison, _ in shown}
    gaps = []
    for level in ("O1", "O2", "O1-bare", "O2-bare"):
        missing = [WORKLOADS[workload][0].lower() for workload in WORKLOADS if (workload, level) not in measured]
        if missing:
            gaps += _prose(f"- {LEVELS[level]}: " + ("no workload" if len(missing) == len(WORKLOADS) else
                                                     ", ".join(missing)) + ".", "  ")
    return ["## What was not measured", "", *_prose(NOT_MEASURED), "", "Levels without a row on a workload:", "",
            *gaps, ""]


METHOD = """## How to reproduce a row

Each row comes from one file under `bench/results/`, named by its date and workload; the file holds the command that
ran it, the commit, the machine and every seed's figures. Run that command from a clean clone at that commit, on an
otherwise idle machine (MindSpore reads a `construct`'s source from disk when it compiles, so editing the working tree
during a run can corrupt it):

<!-- not run by the tests: benchmarks of minutes to hours -->
```bash
python bench/o1_speedup.py --workload launch --rounds 2 --skip-distributed
python bench/o1_speedup.py --workload heavy --rounds 2 --skip-standalone
python bench/render.py
```

The first runs the stand-alone levels against O0 on one workload, the second `configs/O2.json` against plain
data-parallel under `msrun` with 2 workers; each writes a new results file (an existing one is never changed), and
the third renders this page from them. `--first-seed` adds seeds to a row, `--arms` adds levels (`--help` lists them).

## How to read a row

- **Speed-up**: images per second over the whole `Model.train` call (compiles, cache fills and the data pipeline
  included), the level over its baseline, the median of the per-round ratios; the rounds' own ratios follow in
  brackets, and their spread is the speed-up's noise.
- **Accuracy change**: the level's held-out accuracy less its baseline's, in points, the mean over the seeds. The
  test split has 360 images, so one image is 0.28 points; the same arm scatters by about a point from seed to seed,
  so a change under a point is not resolved by two seeds. **Test loss change** likewise, where the run measured it.
- **Machine balance**: the baseline's median step before anything froze and its first step (the compile). Freezing
  saves step time and costs compiles, so a level's speed-up depends on this balance as much as on the workload: rows
  of different balance are not comparable. The files come from more than one machine, each recording its CPU, which
  the balance names: a workload shows each machine's latest run (a transcribed file, which records none, gives way to
  any later run). One machine stepped the compute-bound workload at most of a second, another at tens of
  milliseconds, and freezing paid on the first far more than on the second.
- **(transcribed)**: measured before results were kept as data; the file carries the figures the benchmarks record
  printed, and null where it printed none.

## How the arms interleave

The arms of a round run one after the other in one process, the order reversing every other round, and both start
from the same weights and batch order (round r seeds both with r). A ratio is taken within a round, so a drift of the
machine over a run moves both arms of a round alike. With `--abba` (its command says so) a round runs each arm twice,
A B B A, and an arm's speed is over both its runs, so a drift within the round weighs on both arms alike too; its
accuracy is the mean of the two runs.

## Why a seed's accuracy repeats

On this CPU a seed gives the same accuracy in every run: the weights, the batch order and the kernels are
deterministic. Runs pooled for their timings therefore add no accuracy samples; an accuracy change is a mean over
distinct seeds, which each row names.
"""


def render(records):
    """The results page's text."""
    shown = rows(records)
    lines = ["# Benchmarks", "",
             "<!-- rendered by bench/render.py from bench/results/: edit those files, not this page -->", "",
             *_prose("What each level measured against its baseline on the benchmark workloads, one table a workload. "
                     "Every row is a run's results file under `bench/results/`. [What was not "
                     "measured](#what-was-not-measured), [how to reproduce a row](#how-to-reproduce-a-row), [how to "
                     "read one](#how-to-read-a-row)."), ""]
    for workload in WORKLOADS:
        lines += workload_table(shown, workload)
    lines += not_measured(shown)
    return "\n".join(lines) + "\n" + METHOD


def region_table(records, base):
    """A region's table: each level measured against ``base`` (O0: plain data-parallel O0 for 2 workers), a column
    a workload; a cell gives each row of the results page as speed-up, accuracy change (seeds, and epochs where a
    workload's rows differ in them; machine balance)."""
    shown = [row for row in rows(records) if row[1]["base"] == base]
    workloads = [workload for workload in WORKLOADS if any(row[0]["workload"] == workload for row in shown)]
    varied = {workload for workload in workloads
              if len({record["epochs"] for record, _, _ in shown if record["workload"] == workload}) > 1}

    def cell(record, figures):
        epochs = f", {record['epochs']} epochs" if record["workload"] in varied else ""
        return (f"{figures['ratio']:.2f}x, {_signed(figures['accuracy_change'])} ({_seeds(figures['seeds'])}{epochs}; "
                f"{_balance(record)})")

    lines = [f"| level, against {BASES[base]} | " + " | ".join(WORKLOADS[workload][0].lower() for workload in workloads)
             + " |", "| --- |" + " --- |" * len(workloads)]
    keys = []
    for record, comparison, _ in shown:
        if (comparison["level"], record["workers"]) not in keys:
            keys.append((comparison["level"], record["workers"]))
    for level, workers in keys:
        cells = ["; ".join(cell(record, figures) for record, comparison, figures in shown
                           if (record["workload"], comparison["level"], record["workers"])
                           == (workload, level, workers)) or "not measured" for workload in workloads]
        against = f", {workers} workers, against plain data-parallel" if workers > 1 else ""
        lines.append(f"| {LEVELS[level]}{against} | " + " | ".join(cells) + " |")
    return lines


REGIONS = {"levels": lambda records: region_table(records, "O0"),
           "parts": lambda records: region_table(records, "O1")}
REGION = re.compile(r"(<!-- results: (\w+) -->\n)(.*?)(<!-- /results -->)", re.DOTALL)


def fill_regions(text, records):
    """``text`` with every results region rendered anew (an unknown region's name raises ValueError)."""
    def fill(match):
        name = match.group(2)
        if name not in REGIONS:
            raise ValueError(f"unknown results region {name!r}: known are {', '.join(REGIONS)}")
        return match.group(1) + "\n".join(REGIONS[name](records)) + "\n" + match.group(4)
    return REGION.sub(fill, text)


def rendered_pages(root=ROOT, records=None):
    """``{path relative to root: text as rendered}`` for the results page and every page with a results region."""
    records = results.load() if records is None else records
    pages = {PAGE: render(records)}
    for folder, names in (("", ["README.md"]), ("docs", sorted(os.listdir(os.path.join(root, "docs"))))):
        for name in names:
            path = os.path.join(folder, name)
            if not name.endswith(".md") or path == PAGE:
                continue
            with open(os.path.join(root, path), encoding="utf-8") as handle:
                text = handle.read()
            if REGION.search(text):
                pages[path] = fill_regions(text, records)
    return pages


def stale(root=ROOT, records=None):
    """The pages whose committed text differs from what the results files give."""
    out = []
    for path, text in rendered_pages(root, records).items():
        with open(os.path.join(root, path), encoding="utf-8") as handle:
            if handle.read() != text:
                out.append(path)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--check", action="store_true", help="name the stale pages and exit 1; write nothing")
    args = parser.parse_args(argv)
    if args.check:
        paths = stale()
        for path in paths:
            print(f"{path} is stale: python bench/render.py rewrites it", file=sys.stderr)
        return 1 if paths else 0
    for path, text in rendered_pages().items():
        with open(os.path.join(ROOT, path), "w", encoding="utf-8") as handle:
            handle.write(text)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Draw a ``BoostMonitor`` run log: loss, loss scale (log axis) with the overflow steps marked, and throughput; a dotted
line at the update of each freezing decision the log records.

``python -m boost_cells.plot RUN.jsonl -o RUN.png``. matplotlib is an optional extra
(``pip install 'boost_cells[plot]'``); without it the command says so and exits with code 2.
"""
import argparse
import importlib.util
import sys

from .monitor import read_run

__all__ = ["main", "plot_run"]

INSTALL_HINT = "boost_cells.plot needs matplotlib: pip install 'boost_cells[plot]' (or pip install matplotlib)"


def plot_run(records, output, title=None):
    """Write the three panels for ``records`` (dicts from ``read_run``) to the image file ``output``."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    steps = [r["step"] for r in records]
    figure, (loss_ax, scale_ax, speed_ax) = plt.subplots(3, 1, sharex=True, figsize=(7, 6.5))
    loss_ax.plot(steps, [r["loss"] for r in records], color="tab:blue")
    loss_ax.set_ylabel("mean loss")
    scaled = [r for r in records if r["loss_scale"] is not None]
    if scaled:
        scale_ax.step([r["step"] for r in scaled], [r["loss_scale"] for r in scaled], where="post",
                      color="tab:green", label="loss scale (end of interval)")
        # A record holds the scale after its interval, the scale the next interval's steps start from, so the
        # line steps forward from it, and an overflow marker sits on the scale its interval started from.
        overflow_steps, at_scale, start_scale = [], [], scaled[0]["loss_scale"]
        for record in scaled:
            overflow_steps += record["overflow_steps"]
            at_scale += [start_scale] * len(record["overflow_steps"])
            start_scale = record["loss_scale"]
        scale_ax.plot(overflow_steps, at_scale, "v", color="tab:red", markersize=6,
                      label=f"overflow ({len(overflow_steps)} steps)")
        scale_ax.set_yscale("log", base=2)
        scale_ax.legend(loc="best", fontsize="small")
    else:
        scale_ax.text(0.5, 0.5, "no loss scaling in this run", ha="center", va="center",
                      transform=scale_ax.transAxes)
    scale_ax.set_ylabel("loss scale")
    speed_ax.plot(steps, [r["samples_per_s"] for r in records], color="tab:purple")
    speed_ax.set_ylabel("samples / s")
    speed_ax.set_xlabel("step")
    for axis in (loss_ax, scale_ax, speed_ax):
        axis.grid(True, alpha=0.3)
        for record in records:  # a freezing decision: a dotted line at its update (a step, without accumulation)
            for decision in record.get("decisions", ()):
                axis.axvline(decision["update"], color="tab:gray", linestyle=":", linewidth=1)
    if title:
        loss_ax.set_title(title)
    figure.tight_layout()
    figure.savefig(output, dpi=80)
    plt.close(figure)


def main(argv=None):
    """The command line; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m boost_cells.plot", description=__doc__.splitlines()[0])
    parser.add_argument("run", help="JSON Lines log written by BoostMonitor(path=...)")
    parser.add_argument("-o", "--output", required=True, help="image file to write, e.g. RUN.png")
    parser.add_argument("--title", default=None, help="title over the plot (default: the log's file name)")
    args = parser.parse_args(argv)
    if importlib.util.find_spec("matplotlib") is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    records = read_run(args.run)
    if not records:
        print(f"{args.run} holds no records", file=sys.stderr)
        return 1
    plot_run(records, args.output, args.title if args.title is not None else args.run)
    print(f"wrote {args.output} ({len(records)} intervals, steps 1-{records[-1]['step']})")
    return 0

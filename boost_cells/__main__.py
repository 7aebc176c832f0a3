"""The package's command line: ``python -m boost_cells COMMAND``.

    python -m boost_cells explain CONFIG.json [CONFIG.json ...] [--level {O0,O1,O2}]
                                  [--steps-per-epoch N --epochs E] [--workers W]

``explain`` prints what each config file will do (``boost_cells.explain``): the resolved level and features, each
key that differs from the level's default, and what each feature that is on will do; for gradient freezing the
schedule, its groups, when freezing can start and whether the frozen-prefix cache applies and what it needs.
``--level`` is the level for a file without a ``"level"`` key, as ``Model``'s ``boost_level`` (a file whose level
differs is an error). ``--steps-per-epoch`` and ``--epochs`` (together) put the schedule in that run's updates and
epochs, as ``Model.train`` counts them; ``--workers`` says what AdaSum does with that many data-parallel workers.
The warnings the library gives for a file are printed with its summary.

Exit status: 0 when every file was explained; 2 for bad arguments, or when a file is missing or refused: the
library's own error (naming the file and the key) goes to stderr, and the other files are still explained.
"""
import argparse
import sys
import warnings

from .config import LEVELS, BoostConfig
from .explain import Run, explain
from .rules import allowed, complies

PROG = "python -m boost_cells"


def _count(name):
    """An argparse type: an int that the rule of ``name`` allows (``boost_cells.rules``)."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = text
        if not complies(name, value):
            raise argparse.ArgumentTypeError(f"must be {allowed(name)}, but got {text!r}")
        return value
    return parse


def _parser():
    parser = argparse.ArgumentParser(prog=PROG, description="boost_cells' command line.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    command = commands.add_parser(
        "explain", help="print what a boost config file will do",
        description="Print what each boost config file will do: the resolved level and features, each key that "
                    "differs from the level's default, and what each feature that is on will do (for gradient "
                    "freezing: the schedule, its groups, when freezing can start, and whether the frozen-prefix "
                    "cache applies and what it needs).",
        epilog="Exit status 0 when every file was explained; 2 for bad arguments, or a missing or refused file (the "
               "library's error, naming the file and the key, goes to stderr).")
    command.add_argument("configs", nargs="+", metavar="CONFIG.json", help="boost config files (JSON)")
    command.add_argument("--level", choices=sorted(LEVELS),
                         help="the level of a file without a \"level\" key (as Model's boost_level)")
    command.add_argument("--steps-per-epoch", type=_count("steps_per_epoch"), metavar="N",
                         help="steps an epoch, as Model.train counts them: one worker's batches (with --epochs)")
    command.add_argument("--epochs", type=_count("epochs"), metavar="E", help="epochs of the run (with "
                         "--steps-per-epoch)")
    command.add_argument("--workers", type=_count("workers"), metavar="W",
                         help="data-parallel workers, for what AdaSum does")
    command.set_defaults(parser=command)
    return parser


def _explain(args):
    """Explain each file in turn; a file the library refuses gets its error on stderr. Returns the exit status."""
    if (args.steps_per_epoch is None) != (args.epochs is None):
        args.parser.error("--steps-per-epoch and --epochs go together: give both, or neither")
    run = None if args.epochs is None else Run(args.epochs, args.steps_per_epoch)
    status = 0
    for path in args.configs:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                config = BoostConfig.from_file(path, level=args.level)
            except (OSError, ValueError) as error:
                print(f"{PROG} explain: error: {error}", file=sys.stderr)
                status = 2
                continue
        print(f"{path}:")
        for line in [f"the library warns: {warning.message}" for warning in caught] + explain(config, run,
                                                                                               args.workers):
            print("  " + line)
    return status


def main(argv=None):
    """Run the command in ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    return _explain(_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

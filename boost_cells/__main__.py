"""The package's command line: ``python -m boost_cells COMMAND``.

    python -m boost_cells explain CONFIG [CONFIG ...] [--level {O0,O1,O2}]
                                  [--steps-per-epoch N --epochs E] [--workers W]
    python -m boost_cells configs [--copy DIR [--force]]

``explain`` prints what each config file will do (``boost_cells.explain``): the resolved level and features, each
key that differs from the level's default, and what each feature that is on will do; for gradient freezing the
schedule, its groups, when freezing can start and whether the frozen-prefix cache applies and what it needs; with a
run, the break-even of a frozen level's compile. Lines are wrapped to 119 columns. ``--level`` is the level for a file
without a ``"level"`` key, as ``Model``'s ``boost_level`` (a file whose level differs is an error). ``--steps-per-epoch`` and ``--epochs`` (together) put the schedule in that run's updates and
epochs, as ``Model.train`` counts them; ``--workers`` says what AdaSum does with that many data-parallel workers.
The warnings the library gives for a file are printed with its summary. A CONFIG is a JSON file's path or the name of
a config shipped with boost_cells ("O1"), as ``BoostConfig.from_file`` takes it.

``configs`` lists the configs shipped with boost_cells (``boost_cells.shipped``): each name, with the one-line
summary of what it does (``boost_cells.explain.summary``). ``--copy DIR`` copies the
files into ``DIR`` (made if missing) to edit them; it refuses, copying nothing, when one of them is already there,
unless ``--force``.

Exit status: 0 when every file was explained or copied; 2 for bad arguments, or when a file is missing or refused
(explain: the library's own error, naming the file and the key, goes to stderr, and the other files are still
explained; configs: the error names the files in the way, or the shipped configs' missing directory).
"""
import argparse
import shutil
import sys
import textwrap
import warnings
from pathlib import Path

from .config import LEVELS, BoostConfig
from .explain import explain, summary
from .run import Run
from .rules import allowed, complies
from .shipped import shipped_configs, shipped_dir

PROG = "python -m boost_cells"
WIDTH = 119  # columns: explain's lines are wrapped to stay readable in a terminal


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
    command.add_argument("configs", nargs="+", metavar="CONFIG",
                         help="boost config files (JSON), or names of the shipped configs (python -m boost_cells "
                              "configs lists them)")
    command.add_argument("--level", choices=sorted(LEVELS),
                         help="the level of a file without a \"level\" key (as Model's boost_level)")
    command.add_argument("--steps-per-epoch", type=_count("steps_per_epoch"), metavar="N",
                         help="steps an epoch, as Model.train counts them: one worker's batches (with --epochs)")
    command.add_argument("--epochs", type=_count("epochs"), metavar="E", help="epochs of the run (with "
                         "--steps-per-epoch)")
    command.add_argument("--workers", type=_count("workers"), metavar="W",
                         help="data-parallel workers, for what AdaSum does")
    command.set_defaults(parser=command, run=_explain)
    command = commands.add_parser(
        "configs", help="list the configs shipped with boost_cells, or copy them",
        description="List the configs shipped with boost_cells, each by name with a one-line summary of what it does. "
                    "A name stands for its file wherever a config path is accepted (python -m boost_cells explain O1, "
                    "Model(..., boost_config_dict=\"O1\"), boost_config=\"O1\").",
        epilog="Exit status 0 when the configs were listed or copied; 2 for bad arguments, or when --copy finds a file "
               "in the way (without --force) or cannot write.")
    command.add_argument("--copy", metavar="DIR", help="copy the shipped config files into DIR (made if missing)")
    command.add_argument("--force", action="store_true", help="with --copy: overwrite files of the same names in DIR")
    command.set_defaults(parser=command, run=_configs)
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
                config = BoostConfig.coerce(path, level=args.level, arg="CONFIG")
            except (OSError, ValueError) as error:
                status = _fail("explain", error)
                continue
        print(f"{path}:")
        for line in [f"the library warns: {warning.message}" for warning in caught] + explain(config, run,
                                                                                               args.workers):
            print(_wrapped("  " + line))
    return status


def _wrapped(line):
    """``line`` wrapped to ``WIDTH`` columns, its continuation lines indented two spaces deeper than it (a table's
    rows are short and stay as they are)."""
    indent = " " * (len(line) - len(line.lstrip(" ")) + 2)
    return "\n".join(textwrap.wrap(line, WIDTH, subsequent_indent=indent, break_long_words=False,
                                   break_on_hyphens=False))


def _configs(args):
    """List the shipped configs, or copy them into ``args.copy``. Returns the exit status."""
    if args.force and args.copy is None:
        args.parser.error("--force goes with --copy DIR")
    try:
        shipped = shipped_configs()
    except FileNotFoundError as error:  # a broken install
        return _fail("configs", error)
    if args.copy is not None:
        return _copy(shipped, Path(args.copy), args.force)
    print(f"configs shipped with boost_cells ({shipped_dir()}); a name stands for its file wherever a config path is "
          "accepted:")
    width = max(map(len, shipped))
    for name, path in shipped.items():
        print(f"  {name:<{width}}  {summary(path)}")
    return 0


def _copy(shipped, directory, force):
    """Copy every shipped file into ``directory``; without ``force``, copy nothing when one is already there."""
    if directory.exists() and not directory.is_dir():
        return _fail("configs", f"--copy {directory}: not a directory")
    targets = {path: directory / path.name for path in shipped.values()}
    in_the_way = [str(target) for target in targets.values() if target.exists()]
    if in_the_way and not force:
        return _fail("configs", f"--copy {directory}: it would overwrite {', '.join(in_the_way)}; nothing was "
                     "copied. Pass --force to overwrite them, or copy into another directory.")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for source, target in targets.items():
            shutil.copyfile(source, target)
            print(target)
    except OSError as error:
        return _fail("configs", f"--copy {directory}: {error}")
    return 0


def _fail(command, message):
    """Print ``message`` as ``command``'s error on stderr; returns the exit status 2."""
    print(f"{PROG} {command}: error: {message}", file=sys.stderr)
    return 2


def main(argv=None):
    """Run the command in ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    args = _parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

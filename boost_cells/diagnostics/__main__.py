"""Locate the first overflowing cell of a network with loss on one batch, from the command line.

    python -m boost_cells.diagnostics MODULE:FACTORY --inputs BATCH.npz [--sens S] [--json OUT]

``MODULE:FACTORY`` names a function (importable from the current directory) that returns the network with loss;
the arrays in ``BATCH.npz`` are its inputs, in the order they were saved (``np.savez(path, x, y)``). The report's
table goes to stdout; ``--json OUT`` also writes it as JSON. Exit status 0 when the analysis ran (whether or not
anything overflowed), 2 for bad arguments.
"""
import argparse
import importlib
import sys

import numpy as np
from mindspore import Tensor

from ..files import writable_path, write_atomic
from .overflow_locator import locate_overflow


def _factory(spec):
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise argparse.ArgumentTypeError(f"'MODULE:FACTORY' must look like 'my_module:make_net', but got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise argparse.ArgumentTypeError(f"cannot import module {module_name!r}: {error}") from error
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise argparse.ArgumentTypeError(f"module {module_name!r} has no callable {attr!r}")
    return factory


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m boost_cells.diagnostics",
                                     description="Report every cell whose output or gradient overflowed.")
    parser.add_argument("factory", type=_factory, metavar="MODULE:FACTORY",
                        help="a function returning the network with loss")
    parser.add_argument("--inputs", required=True, metavar="BATCH.npz", help="the network's inputs, in order")
    parser.add_argument("--sens", type=float, default=1.0, help="the loss scale the backward pass starts from")
    parser.add_argument("--json", metavar="OUT", help="also write the report as JSON to OUT")
    args = parser.parse_args(argv)
    if args.json:
        try:
            writable_path("boost_cells.diagnostics", "--json", args.json)
        except ValueError as error:
            parser.error(str(error))
    try:
        # allow_pickle=False: an .npz of ours holds plain arrays; a pickled object array is refused, not run.
        with np.load(args.inputs, allow_pickle=False) as batch:
            inputs = [Tensor(batch[name]) for name in batch.files]
    except Exception as error:  # pylint: disable=broad-except  (a damaged file: BadZipFile, SyntaxError, ...)
        parser.error(f"--inputs: cannot read {args.inputs!r} as an .npz file: {error}")
    report = locate_overflow(args.factory(), *inputs, sens=args.sens)
    print(report)
    if args.json:
        write_atomic(args.json, report.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())

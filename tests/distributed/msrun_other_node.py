"""``msrun`` as launched on a second machine, for multi-node tests on one machine (loopback).

On a real second node, ``--master_addr`` is another machine's address, so msrun starts workers only. On one
machine 127.0.0.1 is this machine's own address, and msrun would also start a scheduler, which fails to bind the
port the first launch's scheduler holds (and fails the launch). This runs msrun's own entry point with its "is the
master address mine?" check answering no; everything else (rank assignment by --node_rank, workers, joining) is
msrun's code.
"""
import sys

from mindspore.parallel.cluster.process_entity import _api

_api._is_local_ip = lambda address: False  # pylint: disable=protected-access

from mindspore.parallel.cluster.run import main  # noqa: E402  pylint: disable=wrong-import-position

if __name__ == "__main__":
    sys.argv[0] = "msrun"
    sys.exit(main())

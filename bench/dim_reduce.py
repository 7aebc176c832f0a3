"""DimReduce against plain Momentum from the same warm-up, on the example data (8x8 digits, the example's LeNet).

    python bench/dim_reduce.py [--warmup-epochs 3] [--epochs 6] [--targets 0.92 0.94 0.96] [--n-components 32]

1. Warm-up: ``--warmup-epochs`` epochs of plain Momentum (lr ``--lr``, momentum 0.9, batch 32), a checkpoint of the
   network every ``--save-every`` steps into a temporary directory (the trajectory), and the whole train cell
   (weights and Momentum state) at the end.
2. From that same point, ``--epochs`` more epochs of (a) plain Momentum and (b) DimReduce (PCA of the trajectory,
   ``--n-components`` directions), same batches in the same order, GRAPH_MODE. Each epoch's held-out accuracy
   and training seconds (graph compile and evaluation excluded; compile time reported apart) are printed.
3. Summary: epochs and seconds to each of ``--targets`` held-out accuracies, and each run's accuracy at the last
   epoch boundary within the same training time (the shorter run's total).

DimReduce's ``alpha`` defaults here to the baseline's learning rate, so the residual (out-of-subspace) part of the
gradient moves as under the baseline's Momentum and the subspace quasi-Newton step comes on top; the reference's
default 0.001 barely moves the residual at this scale.

Timings are only meaningful on a quiet machine.
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import mindspore as ms  # noqa: E402  pylint: disable=wrong-import-position
from mindspore import Tensor, nn  # noqa: E402

from boost_cells import BoostTrainOneStepCell  # noqa: E402
from examples.train import LeNet, accuracy, global_batches, load_data  # noqa: E402

BATCH = 32


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warmup-epochs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=6, help="epochs after the warm-up, per method")
    parser.add_argument("--targets", type=float, nargs="+", default=[0.92, 0.94, 0.96],
                        help="held-out accuracies to reach")
    parser.add_argument("--lr", type=float, default=0.02, help="Momentum learning rate (warm-up and baseline)")
    parser.add_argument("--save-every", type=int, default=2, help="warm-up steps between trajectory checkpoints")
    parser.add_argument("--trajectory-epochs", type=int, default=2,
                        help="save trajectory checkpoints during the last this many warm-up epochs")
    parser.add_argument("--n-components", type=int, default=32)
    parser.add_argument("--alpha", type=float, default=None,
                        help="DimReduce's residual-momentum step; default: --lr")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def make(lr):
    net = LeNet()
    net_with_loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    return net, net_with_loss, nn.Momentum(net.trainable_params(), lr, 0.9)


def epoch_batches(seed, epochs, count):
    rng = np.random.default_rng(seed)
    return [global_batches(rng, count, BATCH) for _ in range(epochs)]


def warm_up(args, data, folder):
    """Plain Momentum for the warm-up epochs; returns the path of the final train-cell checkpoint."""
    x_train, _, y_train, _ = data
    net, net_with_loss, opt = make(args.lr)
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config={"level": "O0"})
    step = 0
    for epoch, batches in enumerate(epoch_batches(args.seed, args.warmup_epochs, len(x_train)), 1):
        for rows in batches:
            cell(Tensor(x_train[rows]), Tensor(y_train[rows]))
            step += 1
            if step % args.save_every == 0 and epoch > args.warmup_epochs - args.trajectory_epochs:
                ms.save_checkpoint(net, os.path.join(folder, "trajectory", f"step{step:05d}.ckpt"))
    final = os.path.join(folder, "warmup_end.ckpt")
    ms.save_checkpoint(cell, final)
    return final, step


def run(args, data, name, start, boost_config):
    """Train ``args.epochs`` epochs from the warm-up's end; returns [(epoch, seconds, accuracy)] and compile s."""
    x_train, x_test, y_train, y_test = data
    net, net_with_loss, opt = make(args.lr)
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=boost_config)
    ms.load_param_into_net(cell, ms.load_checkpoint(start))
    first = epoch_batches(args.seed + 1, 1, len(x_train))[0][0]
    began = time.perf_counter()
    cell.compile(Tensor(x_train[first]), Tensor(y_train[first]))
    compile_seconds = time.perf_counter() - began
    history, seconds = [], 0.0
    net.set_train(False)
    print(f"{name:10s} epoch  0  test acc {accuracy(net, x_test, y_test):.4f}", flush=True)
    for epoch, batches in enumerate(epoch_batches(args.seed + 1, args.epochs, len(x_train)), 1):
        net.set_train(True)
        began = time.perf_counter()
        for rows in batches:
            loss = cell(Tensor(x_train[rows]), Tensor(y_train[rows]))
        loss.asnumpy()
        seconds += time.perf_counter() - began
        net.set_train(False)
        history.append((epoch, seconds, accuracy(net, x_test, y_test)))
        print(f"{name:10s} epoch {epoch:2d}  test acc {history[-1][2]:.4f}  train s {seconds:6.2f}", flush=True)
    return history, compile_seconds


def to_target(history, target):
    for epoch, seconds, acc in history:
        if acc >= target:
            return f"epoch {epoch} ({seconds:.1f} s)"
    return "not reached"


def main(argv=None):
    args = parse_args(argv)
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_seed(args.seed)
    data = load_data()
    with tempfile.TemporaryDirectory() as folder:
        os.makedirs(os.path.join(folder, "trajectory"))
        start, steps = warm_up(args, data, folder)
        checkpoints = len(os.listdir(os.path.join(folder, "trajectory")))
        print(f"warm-up: {args.warmup_epochs} epochs, {steps} steps of Momentum (lr {args.lr}), "
              f"{checkpoints} trajectory checkpoints")
        dim_reduce = {"boost": {"mode": "manual", "dim_reduce": True},
                      "dim_reduce": {"weight_load_dir": os.path.join(folder, "trajectory"),
                                     "n_components": args.n_components,
                                     "alpha": args.lr if args.alpha is None else args.alpha}}
        results = {"momentum": run(args, data, "momentum", start, {"level": "O0"}),
                   "dim_reduce": run(args, data, "dim_reduce", start, dim_reduce)}
    budget = min(history[-1][1] for history, _ in results.values())
    print(f"\nsame-time budget {budget:.2f} s (the shorter run's total)")
    for name, (history, compile_seconds) in results.items():
        within = [h for h in history if h[1] <= budget + 1e-9]
        at_budget = f"{within[-1][2]:.4f} after epoch {within[-1][0]}" if within else "-"
        reached = "  ".join(f"{target:.2f}: {to_target(history, target)}" for target in args.targets)
        print(f"{name:10s} to target  {reached}")
        print(f"{name:10s} acc at budget {at_budget}; final acc {history[-1][2]:.4f}; "
              f"s/epoch {history[-1][1] / len(history):.2f}; compile s {compile_seconds:.1f}")


if __name__ == "__main__":
    main()

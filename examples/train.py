"""Train a small LeNet-style network or a small ResNet with BatchNorm on scikit-learn's 8x8 digits with a boost_cells
train cell.

``--network`` picks the network; left out, the config picks it (``pick_network``): ResNet when the config switches
``less_bn`` on (LeNet has no BatchNorm to remove) or when its gradient freezing cannot split LeNet (2 layers, fewer
than the 3 groups of the level configs O1.json and O2.json; no stages for a frozen-prefix cache); LeNet otherwise. An
explicit ``--network`` that the config's freezing cannot split is refused before anything is built.

The network and optimizer go through ``AutoBoost.network_auto_process_train`` (LessBN and gradient
centralization at O1/O2), the train cell comes from ``boost_cells.build_train_network``; both follow a JSON boost
config. A config with a ``"loss_scale"`` section gives a loss-scaled cell, whose overflow count and loss scale
are reported per epoch.
The data is bundled with scikit-learn (nothing is downloaded) and split 80/20 with a fixed seed, the same split
on every rank. Under ``msrun`` the script trains data-parallel: each rank takes its own slice of every global
batch (``--batch-size`` rows per rank) and only rank 0 prints. Momentum's learning rate falls from ``--lr`` to
zero over the run by half a cosine, set once per epoch, so the final accuracy does not hinge on the last steps.

Stand-alone::

    python examples/train.py --config configs/O0.json
    python examples/train.py --config configs/O1.json     # the ResNet, picked for the config

Data-parallel, two workers::

    msrun --worker_num=2 --local_worker_num=2 --master_port=8129 --join=True --log_dir=logs \\
        examples/train.py --config configs/O0.json

With ``--checkpoint-dir DIR`` it trains through ``boost_cells.Model.train`` instead of its own loop, with a
``ModelCheckpoint`` (CRC-checked) at the end of every epoch into ``DIR/rank<r>/`` and, given ``--monitor``, a
``BoostMonitor`` callback; ``--resume`` continues from the newest checkpoint there, the resume recipe of
docs/reliability.md::

    msrun ... examples/train.py --config configs/loss_scale.json --checkpoint-dir ckpt --monitor run.jsonl
    msrun ... examples/train.py --config configs/loss_scale.json --checkpoint-dir ckpt --monitor run.jsonl --resume

Exits with code 1 when the final test accuracy is below ``--min-accuracy``.
"""
import argparse
import math
import os
import re
import sys
import time

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import Tensor, nn, ops
from mindspore.communication import get_group_size, get_rank, init
from mindspore.train import Callback, CheckpointConfig, ModelCheckpoint
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from boost_cells import AutoBoost, BoostConfig, BoostMonitor, Model, Run, build_train_network
from boost_cells.freezing import freeze_optimizer, unfrozen

SPLIT_SEED = 0
TEST_FRACTION = 0.2


def parse_args(argv=None):
    """The command line."""
    parser = argparse.ArgumentParser(description="Train LeNet on the 8x8 digits with a boost_cells train cell.")
    parser.add_argument("--config", required=True, help="boost config JSON file, e.g. configs/O0.json")
    parser.add_argument("--epochs", type=int, default=20, help="passes over the training set (default: 20)")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="rows per step on each rank; the global batch is this times the rank count "
                             "(default: 32)")
    parser.add_argument("--lr", type=float, default=0.05,
                        help="peak Momentum learning rate, cosine-decayed per epoch (default: 0.05)")
    parser.add_argument("--network", choices=("lenet", "resnet"), default=None,
                        help="lenet (no BatchNorm, 2 layers) or resnet (a small ResNet with 9 BatchNorms, for LessBN "
                             "and gradient freezing); default: picked from the config, resnet when it switches "
                             "less_bn on or its gradient freezing cannot split lenet, else lenet")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights and shuffling (default: 0)")
    parser.add_argument("--mode", choices=("graph", "pynative"), default="graph",
                        help="MindSpore execution mode (default: graph)")
    parser.add_argument("--amp-level", choices=("O0", "O2"), default="O0",
                        help="O2 runs the network in float16 (mindspore.amp.auto_mixed_precision), where a loss "
                             "scale can overflow (default: O0, float32)")
    parser.add_argument("--device-target", default="CPU", help="CPU, GPU or Ascend (default: CPU)")
    parser.add_argument("--monitor", default=None, metavar="PATH",
                        help="write BoostMonitor records (JSON Lines) to PATH, on rank 0; plot them with "
                             "python -m boost_cells.plot PATH -o RUN.png")
    parser.add_argument("--monitor-interval", type=int, default=10,
                        help="steps per monitor record (default: 10)")
    parser.add_argument("--min-accuracy", type=float, default=0.0,
                        help="exit with code 1 if the final test accuracy is below this (default: 0.0)")
    parser.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                        help="train through boost_cells.Model.train, saving a CRC-checked checkpoint of the whole "
                             "train cell at the end of every epoch into DIR/rank<r>/ (every rank its own)")
    parser.add_argument("--resume", action="store_true",
                        help="with --checkpoint-dir: continue from the newest checkpoint there (load_checkpoint, "
                             "then Model.train(..., initial_epoch=its epoch)); a fresh start when there is none")
    parser.add_argument("--train-samples", type=int, default=None, metavar="N",
                        help="train on the first N training images only (quick runs; default: all 1437)")
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or args.monitor_interval < 1:
        parser.error("--epochs, --batch-size and --monitor-interval must be >= 1")
    if args.resume and args.checkpoint_dir is None:
        parser.error("--resume needs --checkpoint-dir")
    if args.train_samples is not None and args.train_samples < 1:
        parser.error("--train-samples must be >= 1")
    try:
        args.network, args.network_reason = pick_network(args.network, BoostConfig.from_file(args.config))
    except (OSError, ValueError) as error:  # the config file, or a network its freezing cannot split
        parser.error(str(error))
    return args


def launched_distributed():
    """Whether this process was started by msrun (or another multi-rank launcher)."""
    return "MS_WORKER_NUM" in os.environ or int(os.environ.get("RANK_SIZE", "1")) > 1


def setup_parallel():
    """Join the communication group and switch to data-parallel mode when launched distributed.

    Returns ``(rank, rank_count)``; ``(0, 1)`` when stand-alone.
    """
    if not launched_distributed():
        return 0, 1
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    return get_rank(), get_group_size()


def load_data():
    """Digits scaled to [0, 1], ``(N, 1, 8, 8)`` float32, int32 labels: ``(x_train, x_test, y_train, y_test)``."""
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    labels = digits.target.astype(np.int32)
    return train_test_split(images, labels, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=labels)


class LeNet(nn.Cell):
    """Two 3x3 convolutions, a 2x2 max-pool and two dense layers: (N, 1, 8, 8) images to 10 logits."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.SequentialCell([
            nn.Conv2d(1, 8, 3, pad_mode="same"), nn.ReLU(),
            nn.Conv2d(8, 16, 3, pad_mode="same"), nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2), nn.Flatten(),
        ])
        self.classifier = nn.SequentialCell([nn.Dense(16 * 4 * 4, 64), nn.ReLU(), nn.Dense(64, num_classes)])

    def construct(self, x):
        return self.classifier(self.features(x))


class BasicBlock(nn.Cell):
    """ResNet basic block: two 3x3 conv-BN pairs and a shortcut (1x1 conv-BN when the shape changes)."""

    def __init__(self, in_channels, out_channels, stride):
        super().__init__()
        self.body = nn.SequentialCell([
            nn.Conv2d(in_channels, out_channels, 3, stride=stride), nn.BatchNorm2d(out_channels), nn.ReLU(),
            nn.Conv2d(out_channels, out_channels, 3), nn.BatchNorm2d(out_channels)])
        self.shortcut = nn.SequentialCell([nn.Conv2d(in_channels, out_channels, 1, stride=stride),
                                           nn.BatchNorm2d(out_channels)]) \
            if stride != 1 or in_channels != out_channels else nn.Identity()
        self.relu = nn.ReLU()

    def construct(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


def resnet(width=16, blocks=2, num_classes=10):
    """A small ResNet as an ``nn.SequentialCell`` of ``3 * blocks + 2`` stages: a conv-BN-ReLU stem, three stages
    of ``blocks`` basic blocks (``width``, 2x and 4x channels; stride 2 entering the second and third), and a
    pooled dense head. (N, 1, H, W) images to ``num_classes`` logits."""
    stages = [nn.SequentialCell([nn.Conv2d(1, width, 3), nn.BatchNorm2d(width), nn.ReLU()])]
    channels = width
    for stage, out_channels in enumerate((width, 2 * width, 4 * width)):
        for block in range(blocks):
            stages.append(BasicBlock(channels, out_channels, 2 if stage and not block else 1))
            channels = out_channels
    stages.append(nn.SequentialCell([nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dense(channels, num_classes)]))
    return nn.SequentialCell(stages)


NETWORKS = {"lenet": LeNet, "resnet": lambda: resnet(width=8, blocks=1)}


def unsplittable(name, config):
    """Why the config's gradient freezing cannot split network ``name`` into its groups (the library's error: too
    few layers for a given ``param_groups``, or no stages for ``cache_frozen_prefix``), or None when it can or is
    off."""
    network = NETWORKS[name]()
    try:
        freeze_optimizer(config, network, nn.SGD(network.trainable_params()))
    except (TypeError, ValueError) as error:
        return str(error)
    return None


def pick_network(choice, config):
    """``(network name, why it was picked)``: ``choice`` (``--network``) as given, why None; or, for None, resnet
    when ``config`` switches ``less_bn`` on or its freezing cannot split lenet, else lenet.

    Raises:
        ValueError: the config's freezing cannot split ``choice`` (the message names ``--network``).
    """
    if choice is not None:
        problem = unsplittable(choice, config)
        if problem is not None:
            fits = [name for name in NETWORKS if unsplittable(name, config) is None]
            fix = f"use --network {fits[0]}, or leave --network out to pick it" if fits \
                else "change 'grad_freeze.param_groups'"
            raise ValueError(f"--network {choice} cannot be trained with this config's gradient freezing: {problem} "
                             f"To train this config, {fix}.")
        return choice, None
    if config.enabled("less_bn"):
        return "resnet", "the config switches less_bn on, and LeNet has no BatchNorm"
    problem = unsplittable("lenet", config)
    if problem is not None:
        return "resnet", f"the config's gradient freezing cannot split LeNet: {problem}"
    if config.enabled("grad_freeze"):
        return "lenet", "less_bn is off, and the config's gradient freezing splits LeNet"
    return "lenet", "the config switches on neither less_bn nor gradient freezing"


def global_batches(rng, sample_count, global_batch):
    """Index arrays of the full global batches of one shuffled epoch (the last partial batch is dropped)."""
    order = rng.permutation(sample_count)
    return [order[start:start + global_batch]
            for start in range(0, sample_count - global_batch + 1, global_batch)]


def cosine_lr(peak, epoch, epochs):
    """The learning rate of ``epoch`` (1-based): ``peak`` decayed to zero over ``epochs`` by half a cosine."""
    return peak * 0.5 * (1.0 + math.cos(math.pi * (epoch - 1) / epochs))


def accuracy(net, images, labels):
    """Fraction of ``images`` that ``net`` classifies as ``labels``."""
    logits = net(Tensor(images)).asnumpy()
    return float((logits.argmax(axis=1) == labels).mean())


def train_epoch(train_cell, batches, x_train, y_train, rank, batch_size, monitor=None):
    """One epoch of steps on this rank's slice of each global batch: ``(mean loss, overflow count, scale)``.

    The loss is this rank's (its slice's mean); the overflow flag is the same on every rank. The scale is the
    loss scale after the last step, or None when the cell has no loss scale. Each step's outputs go to
    ``monitor`` (a ``BoostMonitor``) when given.
    """
    losses, overflows, scale = [], 0, None
    for batch in batches:
        rows = batch[rank * batch_size:(rank + 1) * batch_size]
        out = train_cell(Tensor(x_train[rows]), Tensor(y_train[rows]))
        if monitor is not None:
            monitor.record(out, len(rows))
        if isinstance(out, tuple):
            loss, overflow, scale_tensor = out
            overflows += int(overflow.asnumpy())
            scale = float(scale_tensor.asnumpy())
        else:
            loss = out
        losses.append(float(loss.asnumpy()))
    return float(np.mean(losses)), overflows, scale


def train(args, rank, rank_count, log):
    """Build the network and train cell, train for ``args.epochs``; returns the final test accuracy."""
    x_train, x_test, y_train, y_test = load_data()
    net = NETWORKS[args.network]()
    if args.amp_level != "O0":
        net = ms.amp.auto_mixed_precision(net, args.amp_level)
    config = BoostConfig.from_file(args.config)
    # The level's network and optimizer transforms: LessBN and gradient centralization rebuild the optimizer, and
    # gradient freezing wraps it in a FreezeOpt whose suffix steps share its state and learning rate.
    net, optimizer = AutoBoost(config.level_name, args.config).network_auto_process_train(
        net, nn.Momentum(net.trainable_params(), args.lr, 0.9))
    learning_rate = unfrozen(optimizer).learning_rate
    net_with_loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    train_cell = build_train_network(net_with_loss, optimizer, config)
    train_cell.set_train()
    # The run, as Model.train tells it: a freezing schedule whose config leaves grad_freeze.total_steps out is made
    # for the run's updates (else 65536 would be assumed), and a frozen-prefix cache, where switched on, judges
    # whether it pays by the steps of an epoch.
    train_cell.fit_to_run(Run(args.epochs, len(x_train) // (args.batch_size * rank_count)))
    monitor = None
    if args.monitor is not None and rank == 0:
        monitor = BoostMonitor(args.monitor_interval, args.monitor, train_cell, print_fn=None)
    rng = np.random.default_rng(args.seed)
    global_batch = args.batch_size * rank_count
    log(f"config {args.config}, {type(train_cell).__name__}, {rank_count} rank(s), global batch {global_batch}, "
        f"{len(x_train)} train / {len(x_test)} test images")
    start = time.perf_counter()
    test_accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        # ops.assign, not set_data: PyNative keeps using the old value after set_data once a step has run.
        ops.assign(learning_rate, Tensor(np.float32(cosine_lr(args.lr, epoch, args.epochs))))
        batches = global_batches(rng, len(x_train), global_batch)
        loss, overflows, scale = train_epoch(train_cell, batches, x_train, y_train, rank, args.batch_size, monitor)
        net.set_train(False)
        test_accuracy = accuracy(net, x_test, y_test)
        net.set_train(True)
        scale_text = "-" if scale is None else f"{scale:.10g}"
        log(f"epoch {epoch:3d}  loss {loss:.4f}  test acc {test_accuracy:.4f}  overflows {overflows}  "
            f"loss scale {scale_text}  elapsed {time.perf_counter() - start:.1f}s")
    report_decisions(train_cell, log)
    if monitor is not None:
        monitor.close()
        log(f"monitor records appended to {args.monitor}")
    return test_accuracy


def report_decisions(train_cell, log):
    """Log the run's freezing decisions, one ``decision: <line>`` each (``cell.decisions``, in update order: what
    froze, which levels payback allowed, what the cache did, each with its reason and figures); nothing where the
    cell keeps none (no freezing)."""
    for decision in train_cell.decisions:
        log(f"decision: {decision.line()}")


class ShardedEpochs:
    """This rank's rows of every global batch, epoch after epoch: the loop's data order, as a dataset source.

    Epoch ``e``'s order is the ``e``-th permutation drawn from ``np.random.default_rng(seed)``, as the loop draws
    them, and rank ``r`` of ``n`` takes rows ``[r * batch_size, (r + 1) * batch_size)`` of each global batch of
    ``batch_size * n`` rows (the last partial global batch is dropped). It starts at ``first_epoch``, so a run
    resumed at epoch ``e`` sees exactly the batches an uninterrupted run saw from epoch ``e`` on.
    """

    def __init__(self, images, labels, batch_size, rank, rank_count, seed, first_epoch=0):
        self.images, self.labels = images, labels
        self.batch_size, self.rank, self.rank_count = batch_size, rank, rank_count
        self.seed = seed
        self.epoch = first_epoch

    def __len__(self):
        return len(self.images) // (self.batch_size * self.rank_count)

    def __iter__(self):
        rng = np.random.default_rng(self.seed)
        for _ in range(self.epoch):
            rng.permutation(len(self.images))
        batches = global_batches(rng, len(self.images), self.batch_size * self.rank_count)
        self.epoch += 1
        for batch in batches:
            rows = batch[self.rank * self.batch_size:(self.rank + 1) * self.batch_size]
            yield self.images[rows], self.labels[rows]


def sharded_dataset(images, labels, batch_size, rank, rank_count, seed, first_epoch=0):
    """A ``GeneratorDataset`` of ``ShardedEpochs`` (one step's rows per element), for ``Model.train``."""
    source = ShardedEpochs(images, labels, batch_size, rank, rank_count, seed, first_epoch)
    return ds.GeneratorDataset(source, column_names=["image", "label"], shuffle=False)


class CosineLearningRate(Callback):
    """Set the optimizer's learning rate at the start of every epoch to ``cosine_lr(peak, epoch, epochs)``."""

    def __init__(self, peak, epochs):
        super().__init__()
        self.peak, self.epochs = peak, epochs

    def on_train_epoch_begin(self, run_context):
        params = run_context.original_args()
        optimizer = params.train_network.optimizer
        while not isinstance(optimizer, nn.Optimizer):  # a FreezeOpt holds the real one
            optimizer = optimizer.optimizer
        ops.assign(optimizer.learning_rate, Tensor(np.float32(cosine_lr(self.peak, params.cur_epoch_num,
                                                                           self.epochs))))


class EpochReport(Callback):
    """One line per epoch (through ``log``): the mean loss of this rank, overflows, the loss scale, time."""

    def __init__(self, log):
        super().__init__()
        self.log, self.losses, self.overflows, self.scale = log, [], 0, None
        self.start = time.perf_counter()

    def on_train_step_end(self, run_context):
        out = run_context.original_args().net_outputs
        if isinstance(out, (tuple, list)):
            self.overflows += int(out[1].asnumpy())
            self.scale = float(out[2].asnumpy())
            out = out[0]
        self.losses.append(float(out.asnumpy()))

    def on_train_epoch_end(self, run_context):
        scale = "-" if self.scale is None else f"{self.scale:.10g}"
        self.log(f"epoch {run_context.original_args().cur_epoch_num:3d}  loss {np.mean(self.losses):.4f}  "
                 f"overflows {self.overflows}  loss scale {scale}  elapsed {time.perf_counter() - self.start:.1f}s")
        self.losses, self.overflows = [], 0


_CHECKPOINT_NAME = re.compile(r"-(\d+)_(\d+)\.ckpt$")


def newest_checkpoint(directory):
    """The checkpoint of the latest epoch (then step) in ``directory`` written by ``ModelCheckpoint``
    (``<prefix>-<epoch>_<step>.ckpt``; a relaunch's files get the prefix ``<prefix>_1``), or None."""
    if not os.path.isdir(directory):
        return None
    found = []
    for name in os.listdir(directory):
        match = _CHECKPOINT_NAME.search(name)
        if match and not name.endswith("_breakpoint.ckpt"):
            found.append((int(match.group(1)), int(match.group(2)), name))
    return os.path.join(directory, max(found)[2]) if found else None


def load_resume_state(train_network, path):
    """Load the checkpoint at ``path`` into ``train_network`` (every Parameter of the train cell: weights,
    optimizer state, loss scale and its counters, accumulation buffers, freezing position, ...); returns the
    epoch it was taken at (``ModelCheckpoint``'s ``append_info`` ``epoch_num``).

    Raises:
        ValueError: naming ``path``: the file cannot be read (truncated, corrupted: its CRC is checked), or it
            misses a Parameter of ``train_network`` or holds one the cell does not have (another config).
    """
    try:
        params = ms.load_checkpoint(path, crc_check=True)
    except (ValueError, RuntimeError, OSError, TypeError) as error:
        raise ValueError(f"checkpoint '{path}' cannot be read ({error}); it is truncated or corrupted: resume from "
                         "the one before it") from error
    if "epoch_num" not in params:
        raise ValueError(f"checkpoint '{path}' has no 'epoch_num': save with "
                         "CheckpointConfig(append_info=['epoch_num']) to resume from it")
    epoch = int(params.pop("epoch_num").asnumpy().reshape(-1)[0])
    params.pop("step_num", None)
    missing, unused = ms.load_param_into_net(train_network, params, strict_load=True)
    if missing or unused:
        raise ValueError(f"checkpoint '{path}' does not match the train cell: it misses {sorted(missing)} and holds "
                         f"{sorted(unused)} that the cell does not have (another config or network?)")
    return epoch


def train_with_model(args, rank, rank_count, log, callbacks=(), evaluate=True):
    """The same job through ``boost_cells.Model.train`` with checkpoints: build, resume if asked, train; returns
    ``(test accuracy, model)`` (accuracy None without ``evaluate``). ``callbacks`` are added to the run's (tests
    add a kill switch)."""
    ms.set_seed(args.seed)  # the initial weights depend on --seed only (a relaunch overwrites them anyway)
    x_train, x_test, y_train, y_test = load_data()
    if args.train_samples is not None:
        x_train, y_train = x_train[:args.train_samples], y_train[:args.train_samples]
    net = NETWORKS[args.network]()
    if args.amp_level != "O0":
        net = ms.amp.auto_mixed_precision(net, args.amp_level)
    config = BoostConfig.from_file(args.config)
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Momentum(net.trainable_params(), args.lr, 0.9), boost_level=config.level_name,
                  boost_config_dict=args.config)
    directory = os.path.join(args.checkpoint_dir, f"rank{rank}")
    first_epoch = 0
    if args.resume:
        path = newest_checkpoint(directory)
        if path is not None:
            first_epoch = load_resume_state(model.train_network, path)
            log(f"resuming from {path} (epoch {first_epoch})")
    if first_epoch >= args.epochs:
        log(f"nothing to do: the checkpoint is of epoch {first_epoch} of {args.epochs}")
        return (accuracy(model.predict_network, x_test, y_test) if evaluate else None), model
    dataset = sharded_dataset(x_train, y_train, args.batch_size, rank, rank_count, args.seed, first_epoch)
    steps = dataset.get_dataset_size()
    checkpoint = ModelCheckpoint("boost", directory, CheckpointConfig(
        save_checkpoint_steps=steps, keep_checkpoint_max=5, append_info=["epoch_num"], crc_check=True))
    run_callbacks = [CosineLearningRate(args.lr, args.epochs), checkpoint, *callbacks]
    if args.monitor is not None and rank == 0:
        run_callbacks.append(BoostMonitor(args.monitor_interval, args.monitor, print_fn=None))
    run_callbacks.append(EpochReport(log))
    log(f"config {args.config}, {type(model.train_network).__name__} through Model.train, {rank_count} rank(s), "
        f"global batch {args.batch_size * rank_count}, {steps} steps per epoch, epochs {first_epoch + 1}.."
        f"{args.epochs}")
    model.train(args.epochs, dataset, callbacks=run_callbacks, dataset_sink_mode=False, initial_epoch=first_epoch)
    report_decisions(model.train_network, log)
    if not evaluate:
        return None, model
    model.predict_network.set_train(False)
    return accuracy(model.predict_network, x_test, y_test), model


def main(argv=None):
    """Run the job; returns the process exit code."""
    args = parse_args(argv)
    start = time.perf_counter()
    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE)
    ms.set_device(args.device_target)
    ms.set_seed(args.seed)
    rank, rank_count = setup_parallel()

    def log(message):
        if rank == 0:
            print(message, flush=True)

    if args.network_reason is not None:
        log(f"network {args.network}, picked for {args.config} ({args.network_reason}); choose with --network")
    if args.checkpoint_dir is not None:
        test_accuracy, _ = train_with_model(args, rank, rank_count, log)
    else:
        test_accuracy = train(args, rank, rank_count, log)
    log(f"test accuracy: {test_accuracy:.4f}")
    log(f"total time: {time.perf_counter() - start:.1f}s")
    if test_accuracy < args.min_accuracy:
        if rank == 0:
            print(f"FAILED: test accuracy {test_accuracy:.4f} is below --min-accuracy {args.min_accuracy}",
                  file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Train a small GAN on scikit-learn's 8x8 digits in float16 with dynamic loss scaling, one step per batch.

The discriminator and the generator (float16 Dense layers, float32 master weights and losses) are two
(network with loss, optimizer) pairs of one ``boost_cells.MultiOptimizerTrainOneStepCell``: each step trains the
discriminator, then the generator against the updated discriminator, each in its own overflow window, each with
its own dynamic loss scale, each skipping only its own overflowing steps. At ``--overflow-step`` the real batch is
multiplied by 1e5, so the discriminator's float16 forward pass overflows on that step only (the generator never
sees real data): that step must be skipped by the discriminator alone.

Quality is judged by a logistic-regression digit classifier trained on the real digits: the mean confidence of its
prediction on generated digits and how many of the ten classes they cover, against the same for the untrained
generator. The data is bundled with scikit-learn (nothing is downloaded)::

    python examples/gan.py --steps 400

Exits with code 1 when a loss became non-finite, the planted overflow was not skipped by the discriminator alone,
or the generated digits' classifier confidence is below ``--min-confidence``.
"""
import argparse
import sys
import time

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops
from mindspore.common import dtype as mstype
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression

from boost_cells import DynamicLossScaleUpdate, MultiOptimizerTrainOneStepCell

LATENT = 16
PLANTED_FACTOR = 1e5


def parse_args(argv=None):
    """The command line."""
    parser = argparse.ArgumentParser(description="Train a float16 GAN on the 8x8 digits with per-network loss "
                                                 "scales and a planted discriminator overflow.")
    parser.add_argument("--steps", type=int, default=400, help="training steps (default: 400)")
    parser.add_argument("--batch-size", type=int, default=64, help="real and generated rows per step (default: 64)")
    parser.add_argument("--lr", type=float, default=2e-3, help="Adam learning rate of both networks (default: 2e-3)")
    parser.add_argument("--overflow-step", type=int, default=100,
                        help="step whose real batch is scaled by 1e5 to overflow the discriminator (default: 100)")
    parser.add_argument("--seed", type=int, default=0, help="seed for weights, noise and batches (default: 0)")
    parser.add_argument("--mode", choices=("graph", "pynative"), default="graph",
                        help="MindSpore execution mode (default: graph)")
    parser.add_argument("--min-confidence", type=float, default=0.0,
                        help="exit with code 1 if the classifier's mean confidence on generated digits is below "
                             "this (default: 0.0)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1 or not 0 <= args.overflow_step < args.steps:
        parser.error("need --steps >= 1, --batch-size >= 1 and 0 <= --overflow-step < --steps")
    return args


def float16_dense(n_in, n_out):
    return nn.Dense(n_in, n_out).to_float(mstype.float16)


class Generator(nn.Cell):
    """z (batch, 16) -> digit (batch, 64) in [-1, 1]."""

    def __init__(self):
        super().__init__()
        self.hidden = float16_dense(LATENT, 64)
        self.out = float16_dense(64, 64)

    def construct(self, z):
        return ops.tanh(ops.cast(self.out(ops.relu(self.hidden(z))), mstype.float32))


class Discriminator(nn.Cell):
    """digit (batch, 64) -> realness score (batch, 1), float32."""

    def __init__(self):
        super().__init__()
        self.hidden = float16_dense(64, 64)
        self.out = float16_dense(64, 1)

    def construct(self, x):
        return ops.cast(self.out(ops.leaky_relu(self.hidden(x), 0.2)), mstype.float32)


class DiscriminatorLoss(nn.Cell):
    """Least-squares GAN: mean((D(real) - 1)^2) + mean(D(G(z))^2); the generated batch is a constant here.

    Both loss cells prefix their networks' parameters (``discriminator.hidden.weight``, ...), so the two networks'
    parameters have distinct names, as ``MultiOptimizerTrainOneStepCell`` requires.
    """

    def __init__(self, discriminator, generator):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator

    def construct(self, real, z):
        fake = ops.stop_gradient(self.generator(z))
        return ((self.discriminator(real) - 1) ** 2).mean() + (self.discriminator(fake) ** 2).mean()


class GeneratorLoss(nn.Cell):
    """Least-squares GAN: mean((D(G(z)) - 1)^2); ``real`` is not used."""

    def __init__(self, discriminator, generator):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator

    def construct(self, real, z):
        return ((self.discriminator(self.generator(z)) - 1) ** 2).mean()


class Judge:
    """A logistic-regression digit classifier fitted on the real digits (pixels in [-1, 1])."""

    def __init__(self, digits, labels):
        self.classifier = LogisticRegression(max_iter=500).fit(digits, labels)

    def __call__(self, generated):
        """(mean confidence of the predicted class, number of classes predicted) on ``generated``."""
        probabilities = self.classifier.predict_proba(generated)
        return float(probabilities.max(axis=1).mean()), len(set(probabilities.argmax(axis=1)))


def main(argv=None):
    args = parse_args(argv)
    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE, device_target="CPU")
    ms.set_seed(args.seed)
    rng = np.random.RandomState(args.seed)
    digits = load_digits()
    data = (digits.data / 8.0 - 1.0).astype(np.float32)
    judge = Judge(data, digits.target)
    probe = Tensor(rng.randn(500, LATENT).astype(np.float32))

    generator, discriminator = Generator(), Discriminator()
    pairs = [(DiscriminatorLoss(discriminator, generator), nn.Adam(discriminator.trainable_params(), args.lr, 0.5)),
             (GeneratorLoss(discriminator, generator), nn.Adam(generator.trainable_params(), args.lr, 0.5))]
    scales = [DynamicLossScaleUpdate(2.0 ** 16, window=100), DynamicLossScaleUpdate(2.0 ** 16, window=100)]
    cell = MultiOptimizerTrainOneStepCell(pairs, scales, boost_config={"level": "O0"})
    before = judge(generator(probe).asnumpy())

    skipped, finite, start = [[], []], True, time.time()
    for step in range(args.steps):
        real = data[rng.randint(0, len(data), args.batch_size)]
        if step == args.overflow_step:
            real = real * PLANTED_FACTOR
        z = rng.randn(args.batch_size, LATENT).astype(np.float32)
        losses, overflows, loss_scales = cell(Tensor(real), Tensor(z))
        for network, flag in enumerate(overflows):
            if bool(flag.asnumpy()):
                skipped[network].append(step)
        values = [float(loss.asnumpy()) for loss in losses]
        finite = finite and (step == args.overflow_step or all(np.isfinite(values)))
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss D {values[0]:.4f} G {values[1]:.4f}  loss scale D "
                  f"{float(loss_scales[0].asnumpy()):g} G {float(loss_scales[1].asnumpy()):g}", flush=True)
    after = judge(generator(probe).asnumpy())

    print(f"skipped steps: discriminator {skipped[0]}, generator {skipped[1]}")
    print(f"classifier on generated digits: confidence {before[0]:.3f} -> {after[0]:.3f}, "
          f"classes {before[1]} -> {after[1]}")
    print(f"{args.steps} steps in {time.time() - start:.1f} s")
    planted_alone = args.overflow_step in skipped[0] and args.overflow_step not in skipped[1]
    if not finite or not planted_alone or after[0] < args.min_confidence:
        print(f"FAILED: finite losses {finite}, planted overflow skipped by the discriminator alone {planted_alone},"
              f" confidence {after[0]:.3f} (minimum {args.min_confidence})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

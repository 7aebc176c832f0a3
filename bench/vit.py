"""A small vision transformer for the digits, staged so that gradient freezing can split it (``bench/o1_speedup.py``'s
``vit`` and ``vit-finetune`` workloads).

``vit(...)`` is an ``nn.SequentialCell`` of ``depth + 2`` stages, as ``examples/train.py``'s ``resnet`` is, so that
``boost_cells``' groups and its frozen-prefix cache cut it at stage boundaries
(``boost_cells.freezing.suffixes.groups``'s ``stage_starts``, ``prefix_cache.staged_network``). Shapes, with N images of
``image x image`` pixels, ``patch x patch`` patches, ``T = (image // patch) ** 2`` tokens of ``dim`` features:

- stage 0, ``PatchEmbedding``: (N, 1, image, image) -> (N, T, dim): a ``patch x patch`` convolution of stride
  ``patch`` (one dense map per patch), flattened to tokens, plus a learned position embedding (1, T, dim);
- stages 1 to ``depth``, ``EncoderLayer`` (pre-norm): (N, T, dim) -> (N, T, dim): x + attention(LayerNorm(x)), then
  x + MLP(LayerNorm(x)), the MLP dim -> ``mlp_ratio * dim`` -> dim with GELU, the attention ``heads`` heads of
  ``dim // heads`` features;
- stage ``depth + 1``, ``Head``: (N, T, dim) -> (N, num_classes): a final LayerNorm, the mean over the tokens, a
  Dense layer.

The defaults (16x16 images, 4x4 patches: 16 tokens; dim 64, 4 heads, 4 layers) take tens of milliseconds a training
step at batch 32 on a 2-core CPU in GRAPH_MODE.
"""
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common.initializer import TruncatedNormal, initializer

__all__ = ["EncoderLayer", "Head", "MultiHeadSelfAttention", "PatchEmbedding", "vit"]


class PatchEmbedding(nn.Cell):
    """(N, channels, image, image) -> (N, T, dim): non-overlapping ``patch x patch`` patches projected to ``dim``
    (a convolution of stride ``patch``), plus a learned position embedding ``position`` (1, T, dim)."""

    def __init__(self, image, patch, dim, channels=1):
        super().__init__()
        if image % patch:
            raise ValueError(f"For 'PatchEmbedding', 'image' must be a multiple of 'patch' ({patch}), but got {image}.")
        self.tokens = (image // patch) ** 2
        self.projection = nn.Conv2d(channels, dim, patch, stride=patch, pad_mode="valid", has_bias=True)
        self.position = Parameter(initializer(TruncatedNormal(0.02), (1, self.tokens, dim)), name="position")

    def construct(self, x):
        x = self.projection(x)  # (N, dim, image / patch, image / patch)
        x = x.reshape(x.shape[0], x.shape[1], -1).transpose(0, 2, 1)  # (N, T, dim)
        return x + self.position


class MultiHeadSelfAttention(nn.Cell):
    """(N, T, dim) -> (N, T, dim): ``heads`` heads of scaled dot-product self-attention, one Dense for the queries,
    keys and values together and one for the output."""

    def __init__(self, dim, heads):
        super().__init__()
        if dim % heads:
            raise ValueError(f"For 'MultiHeadSelfAttention', 'dim' must be a multiple of 'heads' ({heads}), but got "
                             f"{dim}.")
        self.heads, self.head_dim = heads, dim // heads
        self.scale = float(1.0 / np.sqrt(self.head_dim))
        self.qkv = nn.Dense(dim, 3 * dim)
        self.out = nn.Dense(dim, dim)
        self.scores = ops.BatchMatMul(transpose_b=True)
        self.mix = ops.BatchMatMul()

    def construct(self, x):
        n, t, d = x.shape
        qkv = self.qkv(x.reshape(n * t, d)).reshape(n, t, 3, self.heads, self.head_dim).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # (N, heads, T, head_dim)
        weights = ops.softmax(self.scores(q, k) * self.scale, axis=-1)  # (N, heads, T, T)
        mixed = self.mix(weights, v).transpose(0, 2, 1, 3).reshape(n * t, d)
        return self.out(mixed).reshape(n, t, d)


class EncoderLayer(nn.Cell):
    """(N, T, dim) -> (N, T, dim), pre-norm: ``x + attention(norm1(x))``, then ``x + fc2(GELU(fc1(norm2(x))))``."""

    def __init__(self, dim, heads, mlp_ratio=2):
        super().__init__()
        self.norm1 = nn.LayerNorm((dim,), begin_norm_axis=-1, begin_params_axis=-1)
        self.attention = MultiHeadSelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm((dim,), begin_norm_axis=-1, begin_params_axis=-1)
        self.fc1 = nn.Dense(dim, mlp_ratio * dim)
        self.gelu = nn.GELU(approximate=False)
        self.fc2 = nn.Dense(mlp_ratio * dim, dim)

    def construct(self, x):
        x = x + self.attention(self.norm1(x))
        n, t, d = x.shape
        return x + self.fc2(self.gelu(self.fc1(self.norm2(x).reshape(n * t, d)))).reshape(n, t, d)


class Head(nn.Cell):
    """(N, T, dim) -> (N, num_classes): a final LayerNorm, the mean over the tokens, a Dense layer."""

    def __init__(self, dim, num_classes):
        super().__init__()
        self.norm = nn.LayerNorm((dim,), begin_norm_axis=-1, begin_params_axis=-1)
        self.dense = nn.Dense(dim, num_classes)

    def construct(self, x):
        return self.dense(self.norm(x).mean(axis=1))


def vit(image=16, patch=4, dim=64, depth=4, heads=4, mlp_ratio=2, num_classes=10):
    """A pre-norm vision transformer as an ``nn.SequentialCell`` of ``depth + 2`` stages: ``PatchEmbedding``,
    ``depth`` ``EncoderLayer``s, ``Head``. (N, 1, image, image) images to ``num_classes`` logits."""
    stages = [PatchEmbedding(image, patch, dim)]
    stages += [EncoderLayer(dim, heads, mlp_ratio) for _ in range(depth)]
    stages.append(Head(dim, num_classes))
    return nn.SequentialCell(stages)


"""Host hooks (``boost_cells.host_hooks``): the frozen-prefix cache's route judges itself on the run at hand (issue
26): it keeps caching where samples repeat, drops itself with one warning that names the key where they do not
(augmentation) or where an epoch's samples cannot fit ``grad_freeze.cache_max_mb``, and says once that it cannot judge
without the run's steps per epoch. Once dropped, the frozen prefix runs inside the compiled step, and the run trains
exactly as freezing without the cache. The repeat window's arithmetic is checked against its rule, and the
data-parallel exchange of the cache's outputs against a 2-rank AllGather stand-in (the real one runs in
tests/test_freeze_distributed.py)."""
import warnings

import numpy as np
import pytest
from mindspore import Tensor, nn

from boost_cells import BoostConfigWarning, BoostTrainOneStepCell, FreezeOpt, Run
from boost_cells.freezing.host.cache_judge import RepeatWindow
from boost_cells.host_hooks import FrozenLevelRoute
from tests.helpers import shuffled_epochs

ROWS, STEPS = 8, 4  # a batch's rows, an epoch's steps


def cell(cache=True, max_mb=2048, width=16, seed=0):
    """A 3-stage network whose front stage freezes for good from the second update (a FreezeOpt walked once)."""
    rng = np.random.RandomState(seed)
    net = nn.SequentialCell([
        nn.Dense(4, width, weight_init=Tensor(rng.randn(width, 4).astype(np.float32) * 0.3), bias_init="zeros"),
        nn.Tanh(),
        nn.Dense(width, 3, weight_init=Tensor(rng.randn(3, width).astype(np.float32) * 0.3), bias_init="zeros")])
    params = net.trainable_params()
    opt = FreezeOpt(nn.Momentum(params, 0.05, 0.9), [params, params[2:]], [0, 1], cyclic=False)
    config = {"grad_freeze": {"cache_frozen_prefix": cache, "cache_max_mb": max_mb}}
    return BoostTrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt, boost_config=config)


def train(train_cell, batches):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for x, y in batches:
            train_cell(x, y)
    return [str(w.message) for w in record if issubclass(w.category, BoostConfigWarning)]


def weights(train_cell):
    return [p.asnumpy() for p in train_cell.weights]


def test_repeating_samples_keep_the_cache(graph_mode):
    trained = cell()
    trained.fit_to_run(Run(None, STEPS))
    assert train(trained, shuffled_epochs(4, fresh=False)) == []
    route = trained.level_route
    assert route.caching and route.aside is None and trained.prefix_cache.hits > 0


def test_changing_samples_drop_the_cache_once_and_train_as_freezing_alone(graph_mode):
    """Every sample changes every epoch: after an epoch of caching and a quarter of the next, none had been seen
    before, so the cache drops itself (one warning naming the key); the run ends where freezing without the cache
    ends, bit for bit (no BatchNorm in the prefix)."""
    cached = cell()
    cached.fit_to_run(Run(None, STEPS))
    messages = train(cached, shuffled_epochs(4, fresh=True))
    assert len(messages) == 1 and "only 0% of the samples it looked up had been seen before" in messages[0]
    assert "'grad_freeze.cache_frozen_prefix'" in messages[0]
    assert not cached.level_route.caching and cached.level_route.active and not cached.prefix_cache.entries
    plain = cell(cache=False)
    train(plain, shuffled_epochs(4, fresh=True))
    for got, want in zip(weights(cached), weights(plain)):
        np.testing.assert_array_equal(got, want)


def test_an_epoch_that_cannot_fit_is_left_out_before_it_fills(graph_mode):
    """An epoch's 32 samples of 9000 float32 features at the frozen level need 1.1 MB: more than a cache_max_mb of 1
    once the first outputs show their size, so the cache drops itself after one batch."""
    trained = cell(max_mb=1, width=9000)
    trained.fit_to_run(Run(None, STEPS))
    messages = train(trained, shuffled_epochs(1, fresh=False))
    assert len(messages) == 1 and "'grad_freeze.cache_max_mb' (1 MB)" in messages[0]
    assert "32 samples need about 1 MB" in messages[0]
    assert trained.prefix_cache.misses == ROWS and not trained.prefix_cache.entries


def test_without_the_epochs_length_the_cache_says_once_that_it_cannot_judge(graph_mode):
    trained = cell()
    messages = train(trained, shuffled_epochs(2, fresh=True))
    assert len(messages) == 1 and "cannot judge whether it pays" in messages[0] and "fit_to_run" in messages[0]
    assert trained.level_route.caching


def test_the_run_is_a_run_of_counts():
    """``fit_to_run`` takes a ``boost_cells.Run``, whose counts are ints >= 1 (its epochs None where the loop does not
    know its length); the old arguments (a step count) are refused, naming what it takes."""
    with pytest.raises(ValueError, match="For 'Run', 'steps_per_epoch' must be an int >= 1, but got 0"):
        Run(None, 0)
    with pytest.raises(TypeError, match=r"fit_to_run', 'run' must be a boost_cells.Run\(epochs, steps_per_epoch\)"):
        cell().fit_to_run(44)


def test_the_repeat_window_opens_an_epoch_after_the_first_cached_step():
    """A cache that starts at call 157 of epochs of 44 calls (position 25) expects 19/44 of the samples of the next
    epoch to have been seen (shuffled data; a sample comes once an epoch); one that starts at position 40 waits an
    epoch more, where it expects all of them; the window spans an eighth of an epoch."""
    window = RepeatWindow(157, 44)
    assert (window.start, window.length, round(window.expected, 4)) == (201, 5, round(19 / 44, 4))
    late = RepeatWindow(40, 44)
    assert (late.start, late.expected) == (128, 1.0)
    assert [window.counts(call, 8, 3) for call in range(200, 206)] == [None] * 5 + [(40, 15)]
    assert window.counts(206, 8, 8) is None


class TwoRankGather:
    """A stand-in for the world group's AllGather on 2 ranks, seen from rank 0: each call returns this rank's array
    followed by what rank 1 sends, padded as rank 1's route pads it (rank 1 sends ``digests`` and ``rows``)."""

    def __init__(self, digests, rows):
        self.digests, self.rows, self.calls = digests, rows, 0

    def __call__(self, tensor):
        mine = tensor.asnumpy()
        self.calls += 1
        if self.calls == 1:
            theirs = np.array([len(self.rows)], np.int32)
        else:
            pad = len(mine) - len(self.rows)
            theirs = (np.pad(self.digests, ((0, pad), (0, 0))).view(np.int32) if self.calls == 2 else
                      np.concatenate([self.rows, np.zeros((pad, *self.rows.shape[1:]), self.rows.dtype)]))
        return Tensor(np.concatenate([mine, theirs]))


@pytest.mark.parametrize("mine, theirs", [(1, 3), (3, 1), (0, 2), (2, 2)])
def test_exchange_concatenates_every_ranks_rows_in_rank_order_whatever_their_counts(mine, theirs):
    """The route's exchange gathers the counts first and pads both arrays to the largest, so ranks that computed
    different numbers of rows (a sample one rank had cached) still trade exactly their own rows, in rank order."""
    rng = np.random.RandomState(mine * 10 + theirs)
    digests = [rng.randint(0, 256, (count, 16)).astype(np.uint8) for count in (mine, theirs)]
    rows = [rng.randn(count, 2, 3).astype(np.float32) for count in (mine, theirs)]
    route = FrozenLevelRoute.__new__(FrozenLevelRoute)
    route.all_gather = TwoRankGather(digests[1], rows[1])
    got_digests, got_rows = route._exchange(digests[0], rows[0])  # pylint: disable=protected-access
    np.testing.assert_array_equal(got_digests, np.concatenate(digests))
    np.testing.assert_array_equal(got_rows, np.concatenate(rows))
    assert got_digests.dtype == np.uint8 and route.all_gather.calls == 3


class OtherRankGives:
    """A stand-in for the world group's AllGather on 2 ranks, seen from rank 0: rank 1 sends ``theirs``."""

    def __init__(self, theirs):
        self.theirs, self.calls = theirs, 0

    def __call__(self, tensor):
        self.calls += 1
        return Tensor(np.concatenate([tensor.asnumpy(), np.array([self.theirs], np.int32)]))


@pytest.mark.parametrize("mine, theirs, error", [(4, 4, None), (4, 3, "4, 3"), (None, 4, "not given, 4")])
def test_the_ranks_must_be_given_the_same_steps_per_epoch_before_the_first_step(mine, theirs, error):
    """Data-parallel, the cache's collectives fall at calls counted in epochs, so ranks given different steps per
    epoch would wait on each other: the route gathers them before the first step and every rank refuses alike,
    naming the argument and what each rank got (a 2-rank AllGather stand-in; the real one runs in
    tests/test_freeze_distributed.py)."""
    train_cell = cell()
    route = train_cell.level_route
    route.all_gather = OtherRankGives(theirs)
    if mine is not None:
        train_cell.fit_to_run(Run(None, mine))
    x, y = np.ones((ROWS, 4), np.float32), np.zeros((ROWS, 3), np.float32)
    if error is None:
        train_cell(Tensor(x), Tensor(y))
        assert route.all_gather.calls == 1
    else:
        with pytest.raises(ValueError, match=rf"'steps_per_epoch' \(fit_to_run\) must be the same .* got {error},"):
            train_cell(Tensor(x), Tensor(y))

"""Pytest fixtures: run a test in both execution modes, on CPU; every test starts from the same process state;
Hypothesis profiles for the property tests and the value strategies several of them share.

The suite runs in random order (pytest-randomly, see pytest.ini), so no test may depend on what an earlier one
left behind. ``fresh_process_state`` (autouse) gives every test the state of a new process: PYNATIVE_MODE on CPU
(MindSpore's default mode), a stand-alone parallel context, no latest ``AutoBoost`` config, mindspore.boost's own
level table and singleton as a new process has them, and a PyNative executor
without a grad graph left open (a test that expects a forward pass to raise under a PyNative train step leaves one
open, and every later PyNative step would fail); it restores the same after the test, so a module-scoped fixture
that runs next does not inherit a test's mode either.
"""
import copy
import math
import os

import mindspore as ms
import mindspore.boost.boost as reference_boost
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from boost_cells.config_in_force import reset_latest_config
from boost_cells.mindspore_internals import reset_pynative_executor

MODES = {"graph": ms.GRAPH_MODE, "pynative": ms.PYNATIVE_MODE}

ms.set_device("CPU")

# mindspore.boost's own process-wide state, as a new process has it: its level table (which its "manual" mode writes
# into) and its AutoBoost singleton (which the reference's train cells and mindspore.train.Model create). Tests that
# compare with the reference read that table, so no test may leave it changed for the next.
REFERENCE_LEVELS = copy.deepcopy(reference_boost._boost_config_level)  # pylint: disable=protected-access


def _fresh_reference():
    """The reference's level table and AutoBoost singleton as a new process has them."""
    levels = reference_boost._boost_config_level  # pylint: disable=protected-access
    if levels != REFERENCE_LEVELS:
        levels.clear()
        levels.update(copy.deepcopy(REFERENCE_LEVELS))
    reference_boost.AutoBoost._instance = None  # pylint: disable=protected-access


def _fresh_state():
    reset_latest_config()
    _fresh_reference()
    reset_pynative_executor()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    if ms.get_auto_parallel_context("parallel_mode") != ms.ParallelMode.STAND_ALONE:
        ms.reset_auto_parallel_context()


@pytest.fixture(autouse=True)
def fresh_process_state():
    """Before and after each test: PYNATIVE_MODE on CPU, stand-alone, no latest AutoBoost config, the reference's
    process-wide state fresh, a clean PyNative executor."""
    _fresh_state()
    yield
    _fresh_state()


# "ci" (the default): deterministic (derandomize: the same examples on every run, no example database written),
# no deadline (a MindSpore step's first call compiles), few examples per property (each test sets its own count,
# kept small for CI's whole suite; the property modules are in the slow tier). "dev": random and ten times the
# examples, for a long local hunt:
# HYPOTHESIS_PROFILE=dev python -m pytest tests/test_config_properties.py tests/test_constructor_properties.py \
#     tests/test_fault_properties.py tests/test_files.py
_COMMON = {"deadline": None, "print_blob": True,
           "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                     HealthCheck.data_too_large]}
settings.register_profile("ci", derandomize=True, database=None, **_COMMON)
settings.register_profile("dev", derandomize=False, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def examples(count):
    """``max_examples`` for a property: ``count`` under the "ci" profile, ten times that under "dev"."""
    return count * (10 if settings().derandomize is False else 1)


# Values the property tests share: JSON-like values of every type, at the edges of int32, int64, float64 and JSON
# (huge ints, NaN, infinities, subnormals) included, nested in lists and objects.
huge_ints = st.sampled_from([2 ** 31, 2 ** 63, 10 ** 30, 10 ** 400, -(10 ** 30)])
specials = st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -1e300, 5e-324, -0.0, 0.0, 2.0 ** 64,
                            2.0 ** 64 * (1 + 2 ** -52), 1.0 - 2 ** -53])
scalars = st.one_of(st.booleans(), st.integers(-3, 70), huge_ints, st.floats(allow_nan=True, allow_infinity=True),
                    specials, st.none(), st.text(max_size=6),
                    st.sampled_from(["1", "2.0", "nan", "true", "O1", "auto", "dynamic", "log2", "static"]))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                            st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                           max_leaves=6)


def pytest_sessionfinish(session):
    """Under pytest-xdist, a worker hands the figures its reliability tests counted to the controller."""
    if hasattr(session.config, "workeroutput"):
        from tests import figures  # pylint: disable=import-outside-toplevel
        session.config.workeroutput["reliability_figures"] = figures.export()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):  # pylint: disable=unused-argument
    """Under pytest-xdist, the controller adds up what each worker counted (``pytest_sessionfinish``)."""
    from tests import figures  # pylint: disable=import-outside-toplevel
    figures.merge(getattr(node, "workeroutput", {}).get("reliability_figures"))


def pytest_terminal_summary(terminalreporter):
    """The figures the reliability tests counted (tests/figures.py), when any ran, summed over pytest-xdist's
    workers."""
    from tests import figures  # pylint: disable=import-outside-toplevel
    if figures.COUNTS or figures.NOTES:
        terminalreporter.section("reliability figures")
        for line in figures.lines():
            terminalreporter.write_line(line)


# The GRAPH_MODE run of a test in both modes compiles its steps, at 2-3 times the PYNATIVE_MODE run's time: it is in
# the slow tier, so the fast tier runs such a test in PYNATIVE_MODE (and the tests that take ``graph_mode`` as
# written). The ids stay "graph" and "pynative".
@pytest.fixture(params=[pytest.param("graph", marks=pytest.mark.slow), "pynative"])
def mode(request):
    """Run the test once in GRAPH_MODE (slow tier) and once in PYNATIVE_MODE (on CPU)."""
    ms.set_context(mode=MODES[request.param], device_target="CPU")
    return request.param


@pytest.fixture
def graph_mode():
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")

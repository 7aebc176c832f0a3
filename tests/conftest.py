"""Pytest fixtures: run a test in both execution modes, on CPU; every test starts from the same process state.

The suite runs in random order (pytest-randomly, see pytest.ini), so no test may depend on what an earlier one
left behind. ``fresh_process_state`` (autouse) gives every test the state of a new process: PYNATIVE_MODE on CPU
(MindSpore's default mode), a stand-alone parallel context, no latest ``AutoBoost`` config, and a PyNative executor
without a grad graph left open (a test that expects a forward pass to raise under a PyNative train step leaves one
open, and every later PyNative step would fail); it restores the same after the test, so a module-scoped fixture
that runs next does not inherit a test's mode either.
"""
import mindspore as ms
import pytest

from boost_cells.config import reset_latest_config
from boost_cells.mindspore_internals import reset_pynative_executor

MODES = {"graph": ms.GRAPH_MODE, "pynative": ms.PYNATIVE_MODE}

ms.set_device("CPU")


def _fresh_state():
    reset_latest_config()
    reset_pynative_executor()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    if ms.get_auto_parallel_context("parallel_mode") != ms.ParallelMode.STAND_ALONE:
        ms.reset_auto_parallel_context()


@pytest.fixture(autouse=True)
def fresh_process_state():
    """Before and after each test: PYNATIVE_MODE on CPU, stand-alone, no latest AutoBoost config, a clean PyNative
    executor."""
    _fresh_state()
    yield
    _fresh_state()


@pytest.fixture(params=sorted(MODES))
def mode(request):
    """Run the test once in GRAPH_MODE and once in PYNATIVE_MODE (on CPU)."""
    ms.set_context(mode=MODES[request.param], device_target="CPU")
    return request.param


@pytest.fixture
def graph_mode():
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")

"""Pytest fixtures: run a test in both execution modes, on CPU; every test starts without a latest AutoBoost."""
import mindspore as ms
import pytest

from boost_cells.config import reset_latest_config

MODES = {"graph": ms.GRAPH_MODE, "pynative": ms.PYNATIVE_MODE}


@pytest.fixture(autouse=True)
def no_latest_config():
    """Forget the config of the latest ``AutoBoost`` before each test: train cells built without ``boost_config=``
    use it, so a test's ``AutoBoost("O1")`` or ``Model(..., boost_level="O1")`` would otherwise decide what later
    tests' cells do."""
    reset_latest_config()


@pytest.fixture(params=sorted(MODES))
def mode(request):
    """Run the test once in GRAPH_MODE and once in PYNATIVE_MODE (on CPU)."""
    ms.set_context(mode=MODES[request.param], device_target="CPU")
    return request.param


@pytest.fixture
def graph_mode():
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")

"""Pytest fixtures: run a test in both execution modes, on CPU."""
import mindspore as ms
import pytest

MODES = {"graph": ms.GRAPH_MODE, "pynative": ms.PYNATIVE_MODE}


@pytest.fixture(params=sorted(MODES))
def mode(request):
    """Run the test once in GRAPH_MODE and once in PYNATIVE_MODE (on CPU)."""
    ms.set_context(mode=MODES[request.param], device_target="CPU")
    return request.param


@pytest.fixture
def graph_mode():
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")

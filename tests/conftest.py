"""Pytest fixtures: run a test in both execution modes, on CPU. Hypothesis profiles for the property tests."""
import os

import mindspore as ms
import pytest
from hypothesis import HealthCheck, settings

MODES = {"graph": ms.GRAPH_MODE, "pynative": ms.PYNATIVE_MODE}

# "ci" (the default): deterministic (derandomize: the same examples on every run, no example database written),
# no deadline (a MindSpore step's first call compiles), few examples per property (each test sets its own count,
# kept small for the 15-minute suite). "dev": random and ten times the examples, for a long local hunt:
# HYPOTHESIS_PROFILE=dev python -m pytest tests/test_properties.py
_COMMON = {"deadline": None, "print_blob": True,
           "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                     HealthCheck.data_too_large]}
settings.register_profile("ci", derandomize=True, database=None, **_COMMON)
settings.register_profile("dev", derandomize=False, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def examples(count):
    """``max_examples`` for a property: ``count`` under the "ci" profile, ten times that under "dev"."""
    return count * (10 if settings().derandomize is False else 1)


def pytest_terminal_summary(terminalreporter):
    """The figures the reliability tests counted (tests/figures.py), when any ran."""
    from tests import figures  # pylint: disable=import-outside-toplevel
    if figures.COUNTS or figures.NOTES:
        terminalreporter.section("reliability figures")
        for line in figures.lines():
            terminalreporter.write_line(line)


@pytest.fixture(params=sorted(MODES))
def mode(request):
    """Run the test once in GRAPH_MODE and once in PYNATIVE_MODE (on CPU)."""
    ms.set_context(mode=MODES[request.param], device_target="CPU")
    return request.param


@pytest.fixture
def graph_mode():
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")

"""Shared pieces for tests that train real MindSpore models on the CPU."""
import io

import mindspore as ms
import pytest


@pytest.fixture(params=["graph", "pynative"])
def mode(request):
    previous = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE if request.param == "graph" else ms.PYNATIVE_MODE)
    yield request.param
    ms.set_context(mode=previous)


@pytest.fixture
def graph_mode():
    previous = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    yield
    ms.set_context(mode=previous)


@pytest.fixture
def pynative_mode():
    previous = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    yield
    ms.set_context(mode=previous)


@pytest.fixture
def quiet():
    return io.StringIO()

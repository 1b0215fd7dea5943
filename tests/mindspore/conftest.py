"""Shared pieces for tests that train real MindSpore models on the CPU."""
import io

import pytest


@pytest.fixture
def quiet():
    return io.StringIO()

"""Fixtures for model-layer unit tests (no real models)."""

from __future__ import annotations

import pytest

from tests.helpers.models import GOOD, make_request


@pytest.fixture
def good_reply() -> dict:
    return dict(GOOD)


@pytest.fixture
def req():
    return make_request

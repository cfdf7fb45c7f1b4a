"""Shared settings of the Python SDK tests: run.sh starts `runway serve` and names it."""

import os

import pytest

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"


@pytest.fixture
def url() -> str:
    return os.environ["RUNWAY_URL"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

"""Shared settings of the Python SDK tests: run.sh starts `runway serve` and names it."""

import os

import pytest

# A caller, and someone who may list every Run of the namespace (run.sh's auth file, or the
# e2e tier's users).
ALICE = os.environ.get("RUNWAY_TOKEN", "alice-token-0123456789abcdef")
BOB = os.environ.get("RUNWAY_LISTER_TOKEN", "bob-token-0123456789abcdef")


@pytest.fixture
def url() -> str:
    return os.environ["RUNWAY_URL"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

"""The official Python SDK 2.x against Runway: it probes 2026-07-28 first and stays there."""

import pytest
from conftest import ALICE
from mcp import types
from mcp.client import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

pytestmark = pytest.mark.anyio


def client(url: str, **callbacks) -> Client:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {ALICE}"})
    return Client(streamable_http_client(url, http_client=http), **callbacks)


async def test_speaks_2026_and_calls_a_tool(url):
    async with client(url) as c:
        assert c.protocol_version == "2026-07-28"
        names = [t.name for t in (await c.list_tools()).tools]
        assert "steps" in names
        r = await c.call_tool("steps", {})
        assert r.content[0].text == "done"


async def test_an_input_step_is_answered_through_input_required(url):
    async def elicit(ctx, params: types.ElicitRequestParams):
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async with client(url, elicitation_callback=elicit) as c:
        r = await c.call_tool("ask-name", {})
        assert r.content[0].text == "hello Ada"

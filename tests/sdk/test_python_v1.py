"""The official Python SDK 1.x against Runway: a 2025-era client (it opens with initialize)."""

from contextlib import asynccontextmanager
from datetime import timedelta

import anyio
import pytest
from conftest import ALICE, BOB
from mcp import ClientSession, types
from mcp.client.streamable_http import streamablehttp_client

pytestmark = pytest.mark.anyio
PATIENCE = 20


@asynccontextmanager
async def session(url: str, token: str = ALICE, **callbacks):
    headers = {"Authorization": f"Bearer {token}"}
    async with streamablehttp_client(url, headers=headers) as (read, write, _):
        async with ClientSession(read, write, **callbacks) as s:
            await s.initialize()
            yield s


async def runs_of(s: ClientSession, workflow: str) -> list[dict]:
    r = await s.call_tool("runway_list_runs", {"workflow": workflow})
    return r.structuredContent["runs"]


async def eventually(what: str, check):
    with anyio.fail_after(PATIENCE):
        while True:
            got = await check()
            if got:
                return got
            await anyio.sleep(0.1)


async def test_connects_and_lists_tools(url):
    async with session(url) as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert tools["steps"].execution.taskSupport == "forbidden"
        assert tools["nap"].execution.taskSupport == "optional"
        await s.send_ping()
        await s.set_logging_level("info")


async def test_a_blocking_call_streams_progress(url):
    seen = []

    async def progress(p, total, message):
        seen.append(p)

    async with session(url) as s:
        r = await s.call_tool("steps", {}, progress_callback=progress)
        assert r.content[0].text == "done"
        assert len(seen) >= 2 and seen == sorted(seen)


async def test_an_input_step_is_answered_by_the_elicitation_callback(url):
    asked = []

    async def elicit(ctx, params: types.ElicitRequestParams):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async with session(url, elicitation_callback=elicit) as s:
        r = await s.call_tool("ask-name", {})
        assert r.content[0].text == "hello Ada"
        assert asked == ["Your name?"]


async def test_a_sample_step_is_answered_by_the_sampling_callback(url):
    async def sample(ctx, params: types.CreateMessageRequestParams):
        assert params.maxTokens == 10
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="teal"),
            model="test",
            stopReason="endTurn",
        )

    async with session(url, sampling_callback=sample) as s:
        r = await s.call_tool("ask-model", {})
        assert r.content[0].text == "the model said teal"


async def test_a_call_the_client_drops_cancels_its_run(url):
    async with session(url) as watcher:
        before = {r["taskId"] for r in await runs_of(watcher, "nap")}
        async with anyio.create_task_group() as tg:
            started = anyio.Event()

            async def call():
                async def progress(*_):
                    started.set()

                async with session(url) as s:
                    await s.call_tool("nap", {}, progress_callback=progress)

            tg.start_soon(call)
            await started.wait()
            tg.cancel_scope.cancel()

        async def cancelled():
            fresh = [r for r in await runs_of(watcher, "nap") if r["taskId"] not in before]
            return fresh and fresh[0]["phase"] == "Cancelled"

        assert await eventually("the dropped call's Run to be cancelled", cancelled)


async def test_tasks_created_followed_listed_cancelled(url):
    async with session(url) as s:
        created = await s.experimental.call_tool_as_task("quick", {}, ttl=60000)
        task_id = created.task.taskId
        assert task_id.startswith("quick-")
        async for status in s.experimental.poll_task(task_id):
            last = status
        assert last.status == "completed"
        result = await s.experimental.get_task_result(task_id, types.CallToolResult)
        assert result.content[0].text == "quick done"

        napping = (await s.experimental.call_tool_as_task("nap", {})).task.taskId
        listed = [t.taskId for t in (await s.experimental.list_tasks()).tasks]
        assert task_id in listed and napping in listed
        await s.experimental.cancel_task(napping)

        async def ended():
            return (await s.experimental.get_task(napping)).status == "cancelled"

        assert await eventually("the cancelled task to end", ended)

    async with session(url, BOB) as bob:
        listed = [t.taskId for t in (await bob.experimental.list_tasks()).tasks]
        assert napping in listed, "bob may list every Run"

"""Voice-agent frameworks, unmodified, against a real Parlour server: Pipecat's
`OpenAIRealtimeLLMService` in a pipeline with no transport (frames go in directly and a processor
reads what comes out), and LiveKit Agents' OpenAI Realtime plugin without a room."""

from __future__ import annotations

import asyncio
import json

from livekit.agents import llm as livekit_llm
from livekit.plugins.openai.realtime import RealtimeModel
from pipecat.adapters.schemas.function_schema import FunctionSchema
from pipecat.adapters.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    EndFrame,
    InputAudioRawFrame,
    LLMFullResponseEndFrame,
    LLMMessagesAppendFrame,
    LLMRunFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.runner import PipelineRunner
from pipecat.pipeline.task import PipelineParams, PipelineTask
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.services.openai.realtime import events as pipecat_events
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService

REPLY_TIMEOUT = 180
WEATHER = {"conditions": "snow", "temperature": "minus 4 degrees"}


class Collect(FrameProcessor):
    """After the service: each reply's text (between the service's response start and end) and its audio."""

    def __init__(self):
        super().__init__()
        self.text: list[str] = []
        self.audio = bytearray()
        self.replies: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMTextFrame):
            self.text.append(frame.text)
        elif isinstance(frame, TTSAudioRawFrame):
            self.audio += frame.audio
        elif isinstance(frame, LLMFullResponseEndFrame):
            self.replies.put_nowait(("".join(self.text), bytes(self.audio)))
            self.text, self.audio = [], bytearray()
        await self.push_frame(frame, direction)


class PassOn(FrameProcessor):
    """Between the user aggregator and the service: where an app's own processor pushes frames the
    service must see (the user aggregator keeps an `LLMMessagesAppendFrame` queued at the top)."""

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)


class PipecatBot:
    """A Pipecat pipeline around `OpenAIRealtimeLLMService` pointed at the server."""

    def __init__(self, server, messages: list[dict], tools: ToolsSchema | None = None, spoken: bool = False):
        output = ["audio"] if spoken else ["text"]
        properties = pipecat_events.SessionProperties(
            output_modalities=output,
            audio=pipecat_events.AudioConfiguration(input=pipecat_events.AudioInput(turn_detection=False)))
        self.service = OpenAIRealtimeLLMService(
            api_key="unused", base_url=server.url(),
            settings=OpenAIRealtimeLLMService.Settings(session_properties=properties,
                                                       system_instruction="Answer in one short sentence."))
        pair = LLMContextAggregatorPair(LLMContext(messages=messages, tools=tools) if tools else
                                        LLMContext(messages=messages))
        self.collect, self.app = Collect(), PassOn()
        self.task = PipelineTask(Pipeline([pair.user(), self.app, self.service, self.collect, pair.assistant()]),
                                 params=PipelineParams(), idle_timeout_secs=None)
        self.running = None

    async def __aenter__(self) -> PipecatBot:
        self.running = asyncio.get_running_loop().create_task(PipelineRunner(handle_sigint=False).run(self.task))
        return self

    async def __aexit__(self, *_exc) -> None:
        await self.task.queue_frame(EndFrame())
        await asyncio.wait_for(self.running, 60)

    async def reply(self) -> tuple[str, bytes]:
        return await asyncio.wait_for(self.collect.replies.get(), REPLY_TIMEOUT)


def stored_roles(server) -> list[str]:
    (session,) = server.service.store.list()
    return [m.message["role"] for m in server.service.store.messages(session.id)]


def test_pipecat_text_turn_and_a_follow_up(make_server):
    server = make_server(reply_tokens=40)

    async def talk():
        async with PipecatBot(server, [{"role": "user", "content": "What is the capital of France?"}]) as bot:
            await bot.task.queue_frame(LLMRunFrame())
            first, _ = await bot.reply()
            # Pipecat sends an appended message as a system item, then response.create.
            await bot.app.push_frame(LLMMessagesAppendFrame([{"role": "user", "content": "And of Germany?"}],
                                                            run_llm=True))
            second, _ = await bot.reply()
            return first, second

    first, second = asyncio.run(talk())
    assert "Paris" in first and "Germany" in second
    assert stored_roles(server) == ["user", "assistant", "system", "assistant"]


def test_pipecat_runs_a_function_tool_and_answers_from_its_result(make_server):
    server = make_server(reply_tokens=40)
    ran = []

    async def get_weather(params):
        ran.append(dict(params.arguments))
        await params.result_callback(WEATHER)

    tools = ToolsSchema(standard_tools=[FunctionSchema(
        name="get_weather", description="The current weather in a city.",
        properties={"city": {"type": "string"}}, required=["city"])])

    async def talk():
        async with PipecatBot(server, [{"role": "user", "content": "What is the weather in Oslo?"}], tools) as bot:
            bot.service.register_function("get_weather", get_weather)
            await bot.task.queue_frame(LLMRunFrame())
            await bot.reply()  # the call
            answer, _ = await bot.reply()  # from the result
            return answer

    answer = asyncio.run(talk())
    assert [call["city"] for call in ran] == ["Oslo"]
    assert "snow" in answer.lower() or "4" in answer
    assert stored_roles(server) == ["user", "assistant", "tool", "assistant"]


def test_pipecat_bot_speaks_first(make_server):
    server = make_server(reply_tokens=24)

    async def talk():
        async with PipecatBot(server, [{"role": "system", "content": "Greet the user in one short sentence."}]) as bot:
            await bot.task.queue_frame(LLMRunFrame())
            return (await bot.reply())[0]

    greeting = asyncio.run(talk())
    assert greeting.strip()
    assert stored_roles(server) == ["assistant"]  # Pipecat made the system message the instructions


def test_pipecat_spoken_turn(make_server, speech):
    server = make_server(reply_tokens=24)
    question = speech("What is the capital of France?")

    async def talk():
        async with PipecatBot(server, [], spoken=True) as bot:
            for start in range(0, len(question), 9_600):  # 200 ms frames, as a transport delivers them
                await bot.app.push_frame(InputAudioRawFrame(audio=question[start:start + 9_600], sample_rate=24_000,
                                                            num_channels=1))
            await bot.app.push_frame(UserStoppedSpeakingFrame())  # manual turns: commit + response.create
            return await bot.reply()

    transcript, audio = asyncio.run(talk())
    assert "Paris" in transcript and len(audio) > 24_000  # over half a second of speech
    (session,) = server.service.store.list()
    heard = server.service.store.messages(session.id)[0].message["content"]
    assert "capital of France" in heard


async def livekit_reply(session) -> tuple[str, list]:
    generation = await session.generate_reply()
    texts, calls = [], []

    async def messages():
        async for message in generation.message_stream:
            async for text in message.text_stream:
                texts.append(text)

    async def functions():
        async for call in generation.function_stream:
            calls.append(call)

    await asyncio.wait_for(asyncio.gather(messages(), functions()), REPLY_TIMEOUT)
    return "".join(texts), calls


@livekit_llm.function_tool
async def get_weather(city: str) -> str:
    """The current weather in a city."""
    return json.dumps(WEATHER)


def test_livekit_text_turn_and_function_tool(make_server):
    server = make_server(reply_tokens=40)

    async def talk():
        model = RealtimeModel(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="unused", modalities=["text"],
                              turn_detection=None)
        try:
            session = model.session()
            await session.update_instructions("Answer in one short sentence.")
            context = livekit_llm.ChatContext.empty()
            context.add_message(role="user", content="What is the capital of France?")
            await session.update_chat_ctx(context)
            text, _ = await livekit_reply(session)
            await session.aclose()

            session = model.session()
            await session.update_instructions("Answer in one short sentence.")
            await session.update_tools([get_weather])
            context = livekit_llm.ChatContext.empty()
            context.add_message(role="user", content="What is the weather in Oslo?")
            await session.update_chat_ctx(context)
            _, calls = await livekit_reply(session)
            context = session.chat_ctx.copy()
            context.items.append(livekit_llm.FunctionCallOutput(call_id=calls[0].call_id, name=calls[0].name,
                                                                output=json.dumps(WEATHER), is_error=False))
            await session.update_chat_ctx(context)
            answer, _ = await livekit_reply(session)
            kinds = [item.type for item in session.chat_ctx.items]
            await session.aclose()
            return text, calls, answer, kinds
        finally:
            await model.aclose()

    text, calls, answer, kinds = asyncio.run(talk())
    assert "Paris" in text
    assert [(c.name, json.loads(c.arguments)["city"]) for c in calls] == [("get_weather", "Oslo")]
    assert "snow" in answer.lower() or "4" in answer
    assert kinds == ["message", "function_call", "function_call_output", "message"]

"""One response as it streams to the client: its output items and the events that carry them.

`ResponseStream` runs the turn engine for one `AskedResponse` and turns the turn's events into
Realtime events: research as conversation items, the reply's message item opened at its first
words (text deltas, or audio transcript deltas while `voice.speech.speaker` speaks each sentence),
the client's function calls as `function_call` output items, calls Parlour ran on an MCP server as
`mcp_call` items, and calls that wait for the user's approval as `mcp_approval_request` items. A
spoken reply's `Speaker` goes to the engine with the request: the engine stores each sentence once
its audio is sent (voice.turns.delivery). It always ends with `response.done`:
`completed`, `cancelled`, `incomplete` at the output limit, or `failed` (`fail`).

Every item a response adds to the conversation is announced there too, as the GA API does:
`conversation.item.added` right after its `response.output_item.added`, `conversation.item.done`
right after its `response.output_item.done`, each with the `previous_item_id` it follows (Pipecat
runs a function call only once it has seen the call's `conversation.item.added`).
"""

from __future__ import annotations

from contextlib import aclosing

from models.tts import TextToSpeech
from voice.realtime import events
from voice.realtime.effects import AskedResponse
from voice.realtime.items import Items, Send
from voice.speech.audio import audio_delta
from voice.speech.speaker import Speaker
from voice.store.sessions import StoredMessage
from voice.tools.mcp import McpFailure
from voice.turns.events import ApprovalAsked, Calls, Delta, Researched, ToolsRan, TurnRequest
from voice.turns.figures import TurnFigures
from voice.turns.service import Turns


class ResponseStream:
    def __init__(self, asked: AskedResponse, engine: Turns, items: Items, tts: TextToSpeech, send: Send,
                 figures: TurnFigures | None = None):
        """`figures` is the turn's record if its clock started before (at a commit)."""
        self.asked, self.engine, self.items, self.tts, self.send = asked, engine, items, tts, send
        self.figures = figures or TurnFigures()
        self.output: list[dict] = []  # finished output items
        self.message_index: int | None = None  # the message item's output_index, once it is opened
        self.previous_item_id: str | None = None  # what the next item the response adds follows
        self.message_previous: str | None = None  # what the message item follows

    async def begin(self) -> None:
        """`response.created`, at once, before research or a wait for the model: clients time out
        waiting for it. The output follows the conversation's last item; with no new user message
        the reply answers from the instructions and the conversation so far (a greeting)."""
        self.previous_item_id = await self.items.last_id()
        await self.send(self._response_event("in_progress", []))

    async def run(self) -> None:
        """Stream the turn; errors propagate (the caller says them with `fail`)."""
        asked, figures = self.asked, self.figures
        speaker = Speaker(self.tts, asked.speed, asked.cancel, self._send_audio, figures) if asked.audio else None
        request = TurnRequest(self.items.session_id, asked.cancel, asked.instructions, asked.max_tokens,
                              asked.tools, asked.tool_choice, spoken=asked.audio, voice=speaker,
                              toolbox=asked.toolbox, item_id=asked.item_id, figures=figures)
        text = ""
        async with aclosing(self.engine.respond(request)) as turn:
            async for event in turn:
                match event:
                    case Researched(stored):
                        await self._announce_research(stored)
                    case Calls(stored=stored):
                        await self._announce_calls(stored)
                    case ToolsRan(stored, failures):
                        await self._announce_tools_ran(stored, failures)
                    case ApprovalAsked(stored):
                        await self._announce_approval_requests(stored)
                    case Delta(piece):
                        if self.message_index is None:
                            await self._open_message()
                        text += piece
                        await self._send_text(piece)
        await self._finish(text)

    async def fail(self, message: str, code: str) -> None:
        """`error`, then `response.done` with status `failed` and the error in its details."""
        failure = {"type": "server_error", "code": code, "message": message}
        await self.send(events.error(message, code, "server_error"))
        await self.send(self._response_event("failed", self.output, failure=failure))

    # Events ------------------------------------------------------------------------------------
    def _response_event(self, status: str, output: list[dict], figures: dict | None = None, **fields) -> dict:
        """`response.created` (status `in_progress`) or `response.done`, with the response object."""
        kind = "response.created" if status == "in_progress" else "response.done"
        return events.event(kind, response=events.response(
            self.asked.id, self.items.session_id, status, self.asked.modalities, output, figures,
            metadata=self.asked.metadata, **fields))

    def _delta_ids(self) -> dict:
        return {"response_id": self.asked.id, "item_id": self.asked.item_id, "output_index": self.message_index,
                "content_index": 0}

    async def _send_text(self, piece: str) -> None:
        kind = "response.output_audio_transcript.delta" if self.asked.audio else "response.output_text.delta"
        await self.send(events.event(kind, **self._delta_ids(), delta=piece))

    async def _send_audio(self, chunk: bytes) -> None:
        await self.send(events.event("response.output_audio.delta", **self._delta_ids(), delta=audio_delta(chunk)))

    async def _added(self, item: dict) -> str | None:
        """`conversation.item.added` for an item the response adds; returns what it follows."""
        previous, self.previous_item_id = self.previous_item_id, item["id"]
        await self.send(events.event("conversation.item.added", previous_item_id=previous, item=item))
        return previous

    async def _open_message(self) -> None:
        """The reply's message item and its one content part, once it has words."""
        asked = self.asked
        self.message_index = len(self.output)
        item = events.assistant_item(asked.item_id, "", "in_progress", asked.audio)
        await self.send(events.event("response.output_item.added", response_id=asked.id,
                                     output_index=self.message_index, item=item))
        self.message_previous = await self._added(item)
        part = {"type": "audio", "transcript": ""} if asked.audio else {"type": "text", "text": ""}
        await self.send(events.event("response.content_part.added", **self._delta_ids(), part=part))

    async def _announce_research(self, stored_messages) -> None:
        """The knowledge base's call and results: conversation items, not output (the client runs nothing)."""
        for stored in stored_messages:
            for payload in events.items(stored):
                previous = await self._added(payload)
                await self.send(events.event("conversation.item.done", previous_item_id=previous, item=payload))

    async def _announce_calls(self, stored_messages) -> None:
        """The client's function calls as output items; the client runs them and answers."""
        response_id = self.asked.id
        for stored in stored_messages:
            for item in events.items(stored):
                index = len(self.output) + (self.message_index is not None)
                pending = {**item, "status": "in_progress", "arguments": ""}
                ids = {"response_id": response_id, "item_id": item["id"], "output_index": index,
                       "call_id": item["call_id"]}
                await self.send(events.event("response.output_item.added", response_id=response_id,
                                             output_index=index, item=pending))
                previous = await self._added(pending)
                await self.send(events.event("response.function_call_arguments.delta", **ids,
                                             delta=item["arguments"]))
                await self.send(events.event("response.function_call_arguments.done", **ids, name=item["name"],
                                             arguments=item["arguments"]))
                await self.send(events.event("response.output_item.done", response_id=response_id,
                                             output_index=index, item=item))
                await self.send(events.event("conversation.item.done", previous_item_id=previous, item=item))
                self.output.append(item)

    async def _announce_tools_ran(self, stored: list[StoredMessage], failures: list[McpFailure | None]) -> None:
        """Calls Parlour ran on an MCP server, as the GA protocol tells them: each an `mcp_call`
        output item, its arguments, then whether it completed or failed, with its output or error."""
        called, results = stored[0], stored[1:]
        for n, (call, result, failure) in enumerate(zip(called.message["tool_calls"], results, failures,
                                                        strict=True)):
            index = len(self.output) + (self.message_index is not None)
            item_id = f"{called.item_id}_{n}" if len(results) > 1 else called.item_id
            item = events.mcp_call_item(item_id, call, None, None)
            ids = {"item_id": item_id, "output_index": index}
            arguments = call["function"]["arguments"]
            await self.send(events.event("response.output_item.added", response_id=self.asked.id,
                                         output_index=index, item={**item, "arguments": ""}))
            previous = await self._added({**item, "arguments": ""})
            await self.send(events.event("response.mcp_call_arguments.delta", response_id=self.asked.id, **ids,
                                         delta=arguments))
            await self.send(events.event("response.mcp_call_arguments.done", response_id=self.asked.id, **ids,
                                         arguments=arguments))
            await self.send(events.event("response.mcp_call.in_progress", **ids))
            done = events.mcp_call_item(item_id, call, None if failure else result.message["content"],
                                        failure.shape if failure else None)
            await self.send(events.event("response.mcp_call.failed" if failure else "response.mcp_call.completed",
                                         **ids))
            await self.send(events.event("response.output_item.done", response_id=self.asked.id,
                                         output_index=index, item=done))
            await self.send(events.event("conversation.item.done", previous_item_id=previous, item=done))
            self.output.append(done)

    async def _announce_approval_requests(self, stored: list[StoredMessage]) -> None:
        """Calls that wait for the user's approval, each an `mcp_approval_request` output item; the
        client answers each with an `mcp_approval_response` item (voice.realtime.approvals)."""
        for asked in stored:
            index = len(self.output) + (self.message_index is not None)
            item = events.item(asked)
            await self.send(events.event("response.output_item.added", response_id=self.asked.id,
                                         output_index=index, item=item))
            previous = await self._added(item)
            await self.send(events.event("response.output_item.done", response_id=self.asked.id,
                                         output_index=index, item=item))
            await self.send(events.event("conversation.item.done", previous_item_id=previous, item=item))
            self.output.append(item)

    async def _finish(self, text: str) -> None:
        """The message's .done events, then `response.done` with the turn's figures."""
        asked, figures = self.asked, self.figures
        cancelled = figures.status == "interrupted"
        if self.message_index is not None:
            ids = self._delta_ids()
            if asked.audio:
                await self.send(events.event("response.output_audio.done", **ids))
                await self.send(events.event("response.output_audio_transcript.done", **ids, transcript=text))
                part = {"type": "audio", "transcript": text}
            else:
                await self.send(events.event("response.output_text.done", **ids, text=text))
                part = {"type": "text", "text": text}
            await self.send(events.event("response.content_part.done", **ids, part=part))
            final = events.assistant_item(asked.item_id, text, "incomplete" if cancelled else "completed",
                                          asked.audio)
            await self.send(events.event("response.output_item.done", response_id=asked.id,
                                         output_index=self.message_index, item=final))
            await self.send(events.event("conversation.item.done", previous_item_id=self.message_previous,
                                         item=final))
            self.output.insert(self.message_index, final)
        status, reason = "completed", None
        if cancelled:
            status, reason = "cancelled", "client_cancelled"
        elif figures.finish_reason == "length" and not figures.tool_calls:
            status, reason = "incomplete", "max_output_tokens"
        await self.send(self._response_event(status, self.output, figures.as_json(), reason=reason))

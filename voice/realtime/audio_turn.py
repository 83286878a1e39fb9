"""Spoken turns over a connection: a committed question is transcribed; a reply is spoken.

`transcribe_commit` runs whisper on the committed buffer and announces the user item with its
transcript before any reply begins. `speak_reply` streams the reply's transcript as tokens arrive
and has Piper speak each sentence as soon as it is complete, in a task beside the model, so
synthesis of one sentence overlaps generation of the next. The first piece is a phrase
(`voice.speech.Sentences`), and when the listener's audio is about to run out before the next
sentence is written, the phrases written so far are spoken rather than leaving a silence. First
audio is timed from the commit.
"""

from __future__ import annotations

import asyncio
import time

from models.stt import Transcript
from voice.figures import TurnFigures, ms
from voice.realtime import events, items
from voice.realtime.client_events import BadEvent
from voice.reply_row import ReplyRow
from voice.realtime.responses import delta_ids, finish, stream_turn
from models.audio import BYTES_PER_MS, RATE
from voice.speech import Sentences, audio_delta


DRAFT_END_CHECK = 300  # ms of a draft's end that must be silent, so it did not stop mid-word
# Seconds of audio still to play when the speaker stops waiting for the sentence and speaks the
# phrases written so far: Piper takes up to about that for a phrase while the model decodes beside it.
SPEAK_AHEAD = 0.8


async def transcribe_commit(conn, audio: bytes, item_id: str, draft=None) -> None:
    """Transcribe committed audio, store the question, and announce it (commit, item, transcript).
    A `draft` made while the key was held is the transcript if it ended in silence and nothing
    was said after it; otherwise the whole audio is transcribed."""
    committed_at = time.perf_counter()
    transcript = await asyncio.to_thread(from_draft, conn.service.stt, audio, draft)
    used_draft = transcript is not None
    if transcript is None:
        transcript = await asyncio.to_thread(conn.service.transcribe, audio)
    if not transcript.text:
        raise BadEvent(f"no speech was heard in {transcript.audio_seconds:.1f} s of audio", "no_speech")
    previous = await asyncio.to_thread(conn.service.store.messages, conn.session_id)
    previous_id = previous[-1].item_id if previous else None
    await conn.send(events.event("input_audio_buffer.committed", previous_item_id=previous_id, item_id=item_id))
    await items.add(conn, {"role": "user", "content": transcript.text}, item_id, audio=True)
    await conn.send(events.event(
        "conversation.item.input_audio_transcription.completed", item_id=item_id, content_index=0,
        transcript=transcript.text, usage={"type": "duration", "seconds": round(transcript.audio_seconds, 3)},
    ))
    conn.transcribed = TurnFigures(started=committed_at, stt_draft=used_draft, stt_ms=ms(
        time.perf_counter() - committed_at) if used_draft else ms(transcript.seconds))


def from_draft(stt, audio: bytes, draft) -> Transcript | None:
    """The draft as the transcript, if the audio after it and its own last moments are silent."""
    if draft is None or not draft.text or draft.covered > len(audio):
        return None
    started = time.perf_counter()
    if stt.has_speech(audio[max(0, draft.covered - DRAFT_END_CHECK * BYTES_PER_MS):], RATE):
        return None  # speech after the draft, or the draft ended mid-word
    return Transcript(draft.text, time.perf_counter() - started, len(audio) / (1000 * BYTES_PER_MS))


async def speak_reply(conn, response) -> None:
    """The audio response: transcript deltas, audio deltas sentence by sentence, then the .done events."""
    figures = response.figures
    tts, cancel, speed = conn.service.tts, response.cancel, response.speed
    queue: asyncio.Queue = asyncio.Queue()
    timeline: list[list] = []  # [sentence, start_ms, end_ms] of the audio sent
    row = ReplyRow(conn.service.store, conn.session_id, response.item_id)

    async def next_piece(playing_since: float | None, sent_ms: int) -> str | None:
        """The next sentence; or, when the listener's audio is about to run out before it is
        written, the phrases written so far."""
        while queue.empty() and playing_since is not None and not cancel.is_set():
            left = playing_since + sent_ms / 1000 - SPEAK_AHEAD - time.perf_counter()
            if left <= 0 and (phrase := sentences.phrase()):
                return phrase
            try:
                return await asyncio.wait_for(queue.get(), max(left, 0.05))
            except TimeoutError:
                pass
        return await queue.get()

    async def speaker() -> None:
        sent_ms, playing_since = 0, None
        while (sentence := await next_piece(playing_since, sent_ms)) is not None:
            if cancel.is_set():
                continue
            chunks = await asyncio.to_thread(lambda: list(tts.synthesize(sentence, speed=speed)))
            start = sent_ms
            for chunk in chunks:
                if cancel.is_set():
                    break
                if figures.first_audio_ms is None:
                    figures.first_audio_ms = figures.since_start()
                playing_since = playing_since or time.perf_counter()
                await conn.send(events.event("response.output_audio.delta", **delta_ids(response),
                                             delta=audio_delta(chunk)))
                sent_ms += len(chunk) // BYTES_PER_MS
            timeline.append([sentence, start, sent_ms])
            if not cancel.is_set():  # its audio is all sent: the sentence is stored
                await row.sentence(sentence, timeline)

    speaking = asyncio.get_running_loop().create_task(speaker())
    sentences = Sentences()

    async def on_delta(text: str) -> None:
        await conn.send(events.event("response.output_audio_transcript.delta", **delta_ids(response), delta=text))
        for sentence in sentences.feed(text):
            queue.put_nowait(sentence)

    text = None
    try:
        text = await stream_turn(conn, response, on_delta, row)
        if rest := sentences.flush():
            queue.put_nowait(rest)
    finally:
        queue.put_nowait(None)
        await speaking
        if text is None:  # failed or stopped from outside mid-speech: keep what was spoken
            await row.abandon({"timeline": timeline})
    figures.end("interrupted" if cancel.is_set() else figures.status or "complete")
    # The stored reply keeps its sentences' audio offsets, for conversation.item.truncate. A reply
    # that only called the client's functions has no words to store.
    if text or not figures.tool_calls:
        await row.finish(text, figures.status, {**figures.as_json(), "timeline": timeline})
    await finish(conn, response, text)

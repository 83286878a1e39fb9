"""The OpenAI Realtime protocol at `/v1/realtime`.

- `client_events`: client events parsed with the `openai` package's models; `events`: server
  events built and checked against them.
- `protocol`: one connection's protocol without I/O: typed events in, effects (`effects`) out,
  and the response lifecycle as one table. `options` checks what a client asks for (tools, modalities,
  turn detection, items).
- `connection`: the websocket side, which reads, writes and runs the effects the protocol asks
  for, each by the object that owns it: `Items` (the conversation's items), `Transcription` (a
  committed question), `ResponseStream` (one response and its reply row) and `SpeechDetector`
  (hands-free turns, `turn_detection`).
"""

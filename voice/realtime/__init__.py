"""The OpenAI Realtime protocol at `/v1/realtime`.

- `client_events`: client events parsed with the `openai` package's models; `events`: server
  events built and checked against them.
- `protocol`: one connection's protocol without I/O: typed events in, effects (`effects`) out,
  and the response lifecycle as one table. `options` checks what a client asks for (tools, modalities,
  turn detection, items).
- `connection`: the websocket side, which reads, writes and runs the effects the protocol asks
  for, with `items`, `responses`, `audio_turn` and `turn_detection` doing the work.
"""

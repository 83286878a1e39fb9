"""Home Assistant's way in: the Wyoming protocol over TCP, beside the websocket. `service` serves
the connection (asr and tts), `assistant` the handle program, `info` the answer to `describe`."""

"""`parlour talk`: a push-to-talk microphone client of `/v1/realtime`.

Press Enter or space to start talking and press it again to send (a terminal cannot see a key
being released). While recording a level meter shows the input; then the transcript and the reply
stream as text while the reply's audio plays as it arrives. Pressing the key (or speaking up)
during playback interrupts: playback stops, and the server gets `response.cancel` and
`conversation.item.truncate` with how much was actually played. `q` quits.

`--input FILE.wav --output FILE.wav` runs one turn without any audio device.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import threading
from collections import deque

import numpy as np

from models.audio import BYTES_PER_MS, RATE, float_to_pcm16, read_wav, resample, write_wav
from voice.clients.chat import ChatError, open_connection

APPEND_BYTES = 9_600  # 200 ms per input_audio_buffer.append
BARGE_IN_LEVEL = 0.08  # input RMS that counts as the user talking over the reply
BARGE_IN_BLOCKS = 3  # ...for this many blocks in a row (about 300 ms)


class AudioDeviceError(ChatError):
    """No PortAudio, or no usable device; one line for the user."""


def load_sounddevice():
    try:
        import sounddevice
    except OSError:
        raise AudioDeviceError(
            "PortAudio is not installed (on Debian or Ubuntu: apt install libportaudio2); "
            "--input FILE.wav --output FILE.wav works without it") from None
    return sounddevice


def list_devices() -> str:
    devices = load_sounddevice().query_devices()
    return str(devices) if len(devices) else "no audio devices found"


def meter(level: float, width: int = 30) -> str:
    """A level bar for an RMS level in [0, 1], on a decibel scale from -60 dBFS."""
    db = 20 * np.log10(max(level, 1e-6))
    filled = int(width * min(1.0, max(0.0, (db + 60) / 60)))
    return "[" + "#" * filled + " " * (width - filled) + f"] {db:5.0f} dB"


# The key says when a question ends, not the server's voice activity detection (the protocol's default).
PUSH_TO_TALK = json.dumps({"type": "session.update", "session": {"type": "realtime",
                                                                "audio": {"input": {"turn_detection": None}}}})


async def send_audio(websocket, pcm: bytes) -> None:
    for start in range(0, len(pcm), APPEND_BYTES):
        chunk = base64.b64encode(pcm[start:start + APPEND_BYTES]).decode()
        await websocket.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
    await websocket.send(json.dumps({"type": "input_audio_buffer.commit"}))
    await websocket.send(json.dumps({"type": "response.create", "response": {"output_modalities": ["audio"]}}))


async def one_turn(url: str, api_key: str | None, input_wav: str, output_wav: str, out=sys.stdout) -> None:
    """Send a WAV file as one spoken question and write the spoken reply to a WAV file."""
    samples, rate = read_wav(input_wav)
    pcm = float_to_pcm16(resample(samples, rate, RATE))
    async with await open_connection(url, api_key) as websocket:
        created = json.loads(await websocket.recv())
        print(f"session {created['session']['id']}", file=out, flush=True)
        await websocket.send(PUSH_TO_TALK)
        await send_audio(websocket, pcm)
        reply = bytearray()
        async for raw in websocket:
            event = json.loads(raw)
            kind = event["type"]
            if kind == "conversation.item.input_audio_transcription.completed":
                print(f"you> {event['transcript']}", file=out, flush=True)
            elif kind == "response.output_item.added":
                print("parlour> ", end="", file=out, flush=True)
            elif kind == "response.output_audio_transcript.delta":
                print(event["delta"], end="", file=out, flush=True)
            elif kind == "response.output_audio.delta":
                reply += base64.b64decode(event["delta"])
            elif kind == "error":
                raise ChatError(event["error"]["message"])
            elif kind == "response.done":
                print(file=out, flush=True)
                break
    write_wav(output_wav, bytes(reply), RATE)
    print(f"{output_wav}: {len(reply) / BYTES_PER_MS / 1000:.2f} s of reply audio", file=out, flush=True)


class Player:
    """Plays PCM16 24 kHz chunks as they arrive and counts how much has actually been played."""

    def __init__(self, sd, device):
        self.chunks: deque[np.ndarray] = deque()
        self.played_frames = 0
        self.lock = threading.Lock()
        self.stream = sd.OutputStream(samplerate=RATE, channels=1, dtype="int16", device=device,
                                      callback=self._callback)
        self.stream.start()

    def _callback(self, outdata, frames, _time, _status) -> None:
        out = np.zeros(frames, dtype=np.int16)
        filled = 0
        with self.lock:
            while filled < frames and self.chunks:
                chunk = self.chunks[0]
                take = min(frames - filled, len(chunk))
                out[filled:filled + take] = chunk[:take]
                filled += take
                if take == len(chunk):
                    self.chunks.popleft()
                else:
                    self.chunks[0] = chunk[take:]
            self.played_frames += filled
        outdata[:, 0] = out

    def feed(self, pcm: bytes) -> None:
        with self.lock:
            self.chunks.append(np.frombuffer(pcm, dtype="<i2"))

    @property
    def playing(self) -> bool:
        with self.lock:
            return bool(self.chunks)

    def played_ms(self) -> int:
        with self.lock:
            return self.played_frames * 1000 // RATE

    def reset(self) -> None:
        """Stop what is playing; the count starts again for the next reply."""
        with self.lock:
            self.chunks.clear()
            self.played_frames = 0

    def close(self) -> None:
        self.stream.stop()
        self.stream.close()


class Recorder:
    """The microphone, always open: records between key presses, and watches for barge-in."""

    def __init__(self, sd, device, on_level):
        info = sd.query_devices(device, "input")
        self.rate = int(info["default_samplerate"])
        self.frames: list[np.ndarray] = []
        self.recording = False
        self.loud_blocks = 0
        self.on_level = on_level
        self.stream = sd.InputStream(samplerate=self.rate, channels=1, dtype="float32", device=device,
                                     blocksize=self.rate // 10, callback=self._callback)
        self.stream.start()

    def _callback(self, indata, frames, _time, _status) -> None:
        block = indata[:, 0].copy()
        level = float(np.sqrt(np.mean(block ** 2))) if block.size else 0.0
        self.loud_blocks = self.loud_blocks + 1 if level > BARGE_IN_LEVEL else 0
        if self.recording:
            self.frames.append(block)
        self.on_level(level)

    def start(self) -> None:
        self.frames, self.recording = [], True

    def stop(self) -> bytes:
        self.recording = False
        samples = np.concatenate(self.frames) if self.frames else np.zeros(0, dtype=np.float32)
        return float_to_pcm16(resample(samples, self.rate, RATE))

    def close(self) -> None:
        self.stream.stop()
        self.stream.close()


def _keys(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue) -> None:
    """Single key presses from the terminal, without waiting for Enter."""
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        while True:
            key = sys.stdin.read(1)
            loop.call_soon_threadsafe(queue.put_nowait, key)
            if key in ("q", ""):
                return
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def talk(url: str, api_key: str | None, device: str | int | None, sd=None,
               keys: asyncio.Queue | None = None) -> None:
    """The interactive client. `sd` (the sounddevice module) and `keys` (a queue of key presses)
    default to the real audio devices and the terminal."""
    sd = sd or load_sounddevice()
    if keys is None and not sys.stdin.isatty():
        raise ChatError("parlour talk reads keys from a terminal; use --input FILE.wav --output FILE.wav in scripts")
    try:
        sd.check_input_settings(device=device)
    except Exception as error:  # PortAudio's own errors name the problem
        raise AudioDeviceError(f"no usable input device: {error}") from None
    loop = asyncio.get_running_loop()
    from_terminal = keys is None
    keys = keys or asyncio.Queue()
    state = {"level": 0.0}
    recorder = Recorder(sd, device, lambda level: state.__setitem__("level", level))
    player = Player(sd, device)
    reply = {"item_id": None, "active": False}
    try:
        async with await open_connection(url, api_key) as websocket:
            created = json.loads(await websocket.recv())
            await websocket.send(PUSH_TO_TALK)
            print(f"session {created['session']['id']}: press Enter or space to talk, again to send, q to quit")
            if from_terminal:
                threading.Thread(target=_keys, args=(loop, keys), daemon=True).start()
            receiver = loop.create_task(_receive(websocket, player, reply))

            async def interrupt() -> None:
                if player.playing or reply["active"]:
                    if reply["active"]:
                        await websocket.send(json.dumps({"type": "response.cancel"}))
                    if reply["item_id"]:
                        await websocket.send(json.dumps({"type": "conversation.item.truncate",
                                                         "item_id": reply["item_id"], "content_index": 0,
                                                         "audio_end_ms": player.played_ms()}))
                    player.reset()

            while True:
                try:
                    key = await asyncio.wait_for(keys.get(), 0.1)
                except TimeoutError:
                    if player.playing and recorder.loud_blocks >= BARGE_IN_BLOCKS:
                        key = " "  # the user is talking over the reply
                    else:
                        continue
                if key in ("q", ""):
                    break
                if key not in ("\n", " "):
                    continue
                await interrupt()
                recorder.start()
                while True:  # recording: show the meter until the key comes again
                    print("\r" + meter(state["level"]), end="", flush=True)
                    try:
                        key = await asyncio.wait_for(keys.get(), 0.1)
                    except TimeoutError:
                        continue
                    if key in ("\n", " ", "q", ""):
                        break
                print("\r" + " " * 42 + "\r", end="", flush=True)
                pcm = recorder.stop()
                if key in ("q", ""):
                    break
                if len(pcm) < 100 * BYTES_PER_MS:
                    print("(too short: hold on a little longer)")
                    continue
                player.reset()
                await send_audio(websocket, pcm)
            receiver.cancel()
    finally:
        recorder.close()
        player.close()


async def _receive(websocket, player: Player, reply: dict) -> None:
    async for raw in websocket:
        event = json.loads(raw)
        kind = event["type"]
        if kind == "conversation.item.input_audio_transcription.completed":
            print(f"you> {event['transcript']}\nparlour> ", end="", flush=True)
        elif kind == "response.output_item.added":
            reply["item_id"], reply["active"] = event["item"]["id"], True
        elif kind == "response.output_audio_transcript.delta":
            print(event["delta"], end="", flush=True)
        elif kind == "response.output_audio.delta":
            player.feed(base64.b64decode(event["delta"]))
        elif kind == "response.done":
            reply["active"] = False
            print(" [interrupted]" if event["response"]["status"] == "cancelled" else "", flush=True)
        elif kind == "error":
            print(f"\nerror: {event['error']['message']}", flush=True)

"""A stand-in for the sounddevice module: the one thing a test machine cannot have is an audio device.

The microphone plays whatever `say()` was given, then silence; the speaker keeps what it was asked to
play. Both run their callbacks from threads at the pace of real time, as PortAudio does.
"""

from __future__ import annotations

import threading
import time

import numpy as np


class _Stream:
    def __init__(self, device: FakeSoundDevice, callback, rate: int, blocksize: int, output: bool):
        self.device, self.callback, self.rate, self.blocksize, self.output = device, callback, rate, blocksize, output
        self.running = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.running = True
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            time.sleep(self.blocksize / self.rate)
            if self.output:
                buffer = np.zeros((self.blocksize, 1), dtype=np.int16)
                self.callback(buffer, self.blocksize, None, None)
                self.device.played.append(buffer[:, 0].copy())
            else:
                self.callback(self.device.microphone(self.blocksize), self.blocksize, None, None)

    def stop(self) -> None:
        self.running = False
        self.thread.join(5)

    def close(self) -> None:
        self.running = False


class FakeSoundDevice:
    def __init__(self, input_rate: int = 48_000):
        self.input_rate = input_rate
        self.pending = np.zeros(0, dtype=np.float32)
        self.lock = threading.Lock()
        self.played: list[np.ndarray] = []

    def say(self, samples: np.ndarray) -> None:
        with self.lock:
            self.pending = np.asarray(samples, dtype=np.float32)

    def microphone(self, frames: int) -> np.ndarray:
        with self.lock:
            block, self.pending = self.pending[:frames], self.pending[frames:]
        out = np.zeros((frames, 1), dtype=np.float32)
        out[: block.size, 0] = block
        return out

    def played_seconds(self, rate: int = 24_000) -> float:
        audible = sum(int(np.count_nonzero(chunk)) > 0 for chunk in list(self.played))
        return audible * 2_400 / rate

    # The parts of the sounddevice API that parlour talk uses.
    def check_input_settings(self, device=None) -> None:
        return None

    def query_devices(self, device=None, kind=None):
        return {"name": "fake microphone", "default_samplerate": self.input_rate}

    def InputStream(self, samplerate, channels, dtype, device, blocksize, callback):
        return _Stream(self, callback, samplerate, blocksize, output=False)

    def OutputStream(self, samplerate, channels, dtype, device, callback):
        return _Stream(self, callback, samplerate, 2_400, output=True)

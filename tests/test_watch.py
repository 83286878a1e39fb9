"""A crash is never silent: `parlour serve` as a user runs it, whose serving child is made to fault
(a real SIGSEGV, caught by faulthandler as a crash in llama.cpp would be), says so in one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


class WatchedServe:
    """`parlour serve` on a free port with the tiny model; stderr is kept to read its last line."""

    def __init__(self, tmp_path: Path):
        self.data = tmp_path / "data"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PARLOUR_")}
        env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "voice.cli", "serve", "--port", "0", "--data-dir", str(self.data),
             "--llm-model", "smollm2-135m", "--threads", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.process.stdout.readline()
        assert "listening on ws://127.0.0.1:" in line, line + self.process.stderr.read()
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        assert len(children) == 1, children
        self.child = int(children[0])

    def end(self) -> tuple[int, list[str]]:
        """The watcher's exit status and its stderr lines."""
        _, err = self.process.communicate(timeout=60)
        return self.process.returncode, err.strip().splitlines()


def gone(pid: int, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
        except FileNotFoundError:
            return True
        if state == "Z":  # dead, waiting to be reaped
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_fault_in_the_serving_process_is_one_line_naming_it(tmp_path):
    serve = WatchedServe(tmp_path)
    os.kill(serve.child, signal.SIGSEGV)
    status, lines = serve.end()
    assert status == 128 + signal.SIGSEGV
    assert lines[-1].startswith("parlour: error: the service crashed (SIGSEGV, segmentation fault) in "), lines
    assert "llama.cpp uses " in lines[-1] and "repacking off" in lines[-1]
    assert str(serve.data / "crash.log") in lines[-1]
    log = (serve.data / "crash.log").read_text()
    assert "Fatal Python error: Segmentation fault" in log and f"process {serve.child}," in log


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_watcher_passes_sigterm_on_and_takes_its_child_with_it(tmp_path):
    serve = WatchedServe(tmp_path)
    serve.process.send_signal(signal.SIGTERM)
    status, lines = serve.end()
    assert status == 0 and not [line for line in lines if "error" in line], lines
    assert gone(serve.child)

    killed = WatchedServe(tmp_path)
    killed.process.kill()  # the watcher dies outright: its child must not serve on alone
    killed.process.wait(30)
    assert gone(killed.child)

"""`parlour serve` runs in a child process that this one watches, so that a crash is never silent.

A fault in an engine's native code (llama.cpp, CTranslate2, ONNX Runtime) kills the process
outright: Python cannot catch it, and all a user would see is exit status 139. So the command forks
before anything is loaded. The child serves, with `faulthandler` writing the Python stack of a
fatal signal to `crash.log` in the data directory. The parent only waits: when the child dies of
a signal it prints one line naming the signal, where the stack says it happened, what llama.cpp
uses on this CPU and where the log is, and exits with 128 + the signal's number.

Signals: Ctrl-C reaches both processes (one process group): the parent ignores it and the child
stops as usual. SIGTERM and SIGHUP sent to the parent are passed to the child; a child that dies
of the signal it was asked to stop by (still loading, say) is no crash and gets no line. If the parent is
killed outright, the child is killed too (Linux's parent-death signal), so a killed service never
leaves a server running without its watcher.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import re
import signal
import sys
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
# Signals that mean the process faulted, rather than being told to stop.
FAULTS = {signal.SIGSEGV: "segmentation fault", signal.SIGBUS: "bus error", signal.SIGILL: "illegal instruction",
          signal.SIGFPE: "arithmetic fault", signal.SIGABRT: "aborted"}


_open_logs: list = []  # faulthandler writes to the log's descriptor: it must stay open


def serve_watched(crash_log: Path, engine: str) -> None:
    """Fork: return in the child, which goes on to serve; in the parent, wait for the child and
    leave with its status (`SystemExit`), saying in one line why if it died of a signal. `engine`
    describes the language model's settings for that line."""
    crash_log.parent.mkdir(parents=True, exist_ok=True)
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        _watched_child(parent, crash_log)
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    passed_on: set[int] = set()

    def pass_on(number: int, _frame) -> None:
        passed_on.add(number)
        os.kill(child, number)

    for forwarded in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(forwarded, pass_on)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number in passed_on | {signal.SIGINT}:  # stopped as asked (before it could stop cleanly)
            raise SystemExit(128 + number)
        print(f"parlour: error: {crash_line(signal.Signals(number), crash_log, engine)}", file=sys.stderr, flush=True)
        raise SystemExit(128 + number)
    raise SystemExit(os.waitstatus_to_exitcode(status))


def _watched_child(parent: int, crash_log: Path) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the watcher died before the line above took effect
            os._exit(1)
    log = crash_log.open("a", buffering=1)
    log.write(f"--- parlour serve, process {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    faulthandler.enable(file=log, all_threads=True)
    _open_logs.append(log)


def crash_line(number: signal.Signals, crash_log: Path, engine: str) -> str:
    """One line for a child that died of signal `number`."""
    if number not in FAULTS:
        return f"the service was killed by {number.name}"
    where = _fault_site(crash_log)
    return (f"the service crashed ({number.name}, {FAULTS[number]}){' in ' + where if where else ''}; "
            f"llama.cpp uses {_engine_features()}, {engine}; the stack is in {crash_log}")


def _fault_site(crash_log: Path) -> str:
    """The innermost frame of the faulting thread in the log's last entry: "llama_cpp/_internals.py, decode"."""
    try:
        last = crash_log.read_text(errors="replace").rsplit("--- parlour serve", 1)[-1]
    except OSError:
        return ""
    current = last.split("Current thread", 1)
    match = re.search(r'File "([^"]+)", line \d+ in (\S+)', current[1] if len(current) > 1 else last)
    if not match:
        return ""
    path = Path(match.group(1))
    return f"{path.parent.name}/{path.name}, {match.group(2)}"


def _engine_features() -> str:
    try:
        from models.engine import cpu_features

        return " ".join(cpu_features()) or "no listed CPU features"
    except (ImportError, OSError):
        return "unknown CPU features"

"""llama-cpp-python's OpenAI-compatible server, loading its model the way Parlour loads one.

`python -m tests.llama_cpp_server ARGS` takes the arguments of `python -m llama_cpp.server`. The
server builds its `Llama` itself and has no setting for llama.cpp's weight repacking, which
crashes on AMX CPUs (models.engine), so the whole server runs inside `loading_with`.
"""

import runpy

from models.engine import EngineSettings, loading_with

if __name__ == "__main__":
    with loading_with(EngineSettings()):
        runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)

"""The engine on this CPU: every profile loads and answers in a child process (so a crash in
llama.cpp is a failed test naming the profile and the CPU, not a dead test run), weights are never
repacked unless asked, and repacking is refused where the build would use AMX."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from models.engine import EngineRefused, EngineSettings, check, cpu_features, open_llama, system_info, uses_amx
from models.weights import DEFAULT_PROFILE, PROFILES, resolve

ANSWER = """
import sys
from models.llm import LanguageModel
from models.weights import resolve
llm = LanguageModel(resolve("llm", sys.argv[1]), context=2048, threads=2)
question = [{"role": "system", "content": "Answer in one word."},
            {"role": "user", "content": "What is the capital of France?"}]
print(llm.complete(question, max_tokens=8, temperature=0))
"""


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_each_profile_loads_and_answers_in_a_child_process(name):
    if not PROFILES[name].installed():
        pytest.skip(f"{name} is not installed")
    child = subprocess.run([sys.executable, "-c", ANSWER, "" if name == DEFAULT_PROFILE else name],
                           capture_output=True, text=True, timeout=600)
    died = f"signal {signal.Signals(-child.returncode).name}" if child.returncode < 0 else f"status {child.returncode}"
    assert child.returncode == 0, (f"{name} died ({died}) on a CPU where llama.cpp uses "
                                   f"{' '.join(cpu_features())}:\n{child.stderr[-1500:]}")
    assert "paris" in child.stdout.lower(), child.stdout


def test_cpu_features_are_read_from_llama_cpps_own_line():
    info = system_info()
    features = cpu_features()
    assert features and all(f"{name} = 1" in info for name in features)
    assert cpu_features("CPU : SSE3 = 1 | AVX512 = 0 | AMX_INT8 = 1 | LLAMAFILE = 1 |") == ["SSE3", "AMX_INT8",
                                                                                          "LLAMAFILE"]
    assert uses_amx(["AVX2", "AMX_INT8"]) and not uses_amx(["AVX2", "AVX512"])


def test_weights_are_loaded_without_repacking_unless_asked(llm):
    assert llm.engine.repack is False and llm._llm.model_params.use_extra_bufts is False
    # The library's own defaults are back once the load is over: nothing else in the process changes.
    import llama_cpp.llama_cpp as lib

    assert lib.llama_model_default_params().use_extra_bufts is True


def test_repacking_is_refused_where_the_build_uses_amx():
    settings = EngineSettings(repack=True)
    if uses_amx():
        with pytest.raises(EngineRefused, match="AMX"):
            check(settings)
        with pytest.raises(EngineRefused, match="AMX"):
            open_llama(resolve("llm", "smollm2-135m"), settings, context=512)
    else:  # elsewhere it is a choice, and it is taken
        tiny = open_llama(resolve("llm", "smollm2-135m"), settings, context=512)
        assert tiny.model_params.use_extra_bufts is True

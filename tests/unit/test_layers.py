"""Layers that only point down (docs/architecture.md, "Layers"): every import of Parlour's own
packages in fitting/, models/ and voice/ goes to the importing module's layer or a lower one.

Only source files are read (parsed with `ast`), nothing is imported, so this runs in a moment. Every
import counts, those inside functions and under TYPE_CHECKING too: a lazy import is still a
dependency. A module the table below does not place fails the test, so a new one is placed on purpose.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("fitting", "models", "voice")
OWN = ("fitting", "models", "voice", "harness", "tests", "scripts")

# The layers, lowest first; a module may import from its own layer and those before it. A module
# belongs to the longest prefix that names it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("fitting", ("fitting",)),
    ("models", ("models",)),
    # voice/__init__.py runs before any voice module, and config.py (the settings, which import only
    # fitting's errors) is read by the turn engine as well as the server: both sit at the bottom of voice/.
    ("voice's base: text helpers and configuration", ("voice.__init__", "voice.text", "voice.config")),
    ("store, knowledge and tools", ("voice.store", "voice.knowledge", "voice.tools")),
    ("turns", ("voice.turns",)),
    # validation.py and http_api.py are the doors' shared parts: the front ends and the server use them.
    ("front ends", ("voice.realtime", "voice.wyoming", "voice.chat", "voice.speech", "voice.validation",
                    "voice.http_api")),
    # The service put together and run: only the server and the command line use these.
    ("server, command line and clients", ("voice.server", "voice.cli", "voice.clients", "voice.engines",
                                          "voice.front_door", "voice.hosts", "voice.replay", "voice.watch")),
    # What the tests and scripts share, and they themselves: nothing in the service imports them.
    ("harness, tests and scripts", ("harness", "tests", "scripts")),
]


def layer_of(module: str) -> int | None:
    """The index in LAYERS of a dotted module name, by the longest prefix that names it. The name
    "voice.__init__" places the package `voice` alone, not its modules."""
    module = "voice.__init__" if module == "voice" else module
    best, best_length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    return best


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported(path: Path) -> list[tuple[int, str, str]]:
    """(line, the import as written, the module it reaches) for each import of Parlour's own
    packages in a source file. `from voice.chat import routes` reaches voice.chat.routes."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append((node.lineno, f"import {alias.name}", alias.name))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the file's package, up level - 1
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            written = f"from {'.' * node.level}{node.module or ''} import {', '.join(a.name for a in node.names)}"
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.append((node.lineno, written, target if is_module(target) else base))
    return [(line, written, target) for line, written, target in found if target.split(".")[0] in OWN]


def upward_imports() -> tuple[list[str], list[str]]:
    """(the imports that point up a layer, the modules no layer places), each told in a line."""
    upward, unplaced = [], []
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            name, where = module_name(path), path.relative_to(ROOT)
            own = layer_of(name)
            if own is None:
                unplaced.append(f"{where}: module {name} is in no layer; place it in LAYERS and docs/architecture.md")
                continue
            for line, written, target in imported(path):
                reached = layer_of(target)
                if reached is None:
                    unplaced.append(f"{where}:{line}: `{written}` reaches {target}, which is in no layer")
                elif reached > own:
                    upward.append(f"{where}:{line}: `{written}` reaches {target} ({LAYERS[reached][0]}), "
                                  f"above {name} ({LAYERS[own][0]})")
    return upward, unplaced


def test_every_module_is_in_a_layer():
    _, unplaced = upward_imports()
    assert not unplaced, "modules or imports no layer places:\n" + "\n".join(unplaced)


def test_imports_point_to_the_same_layer_or_a_lower_one():
    upward, _ = upward_imports()
    assert not upward, "imports that point up a layer (docs/architecture.md, Layers):\n" + "\n".join(upward)


def test_the_scan_sees_the_imports():
    """The scan reads real imports: the turn engine imports the store, a layer below it, and the
    server imports a front end by `from voice.chat import routes`."""
    engine = {target for _, _, target in imported(ROOT / "voice/turns/engine.py")}
    server = {target for _, _, target in imported(ROOT / "voice/server.py")}
    assert "voice.store.sessions" in engine and "voice.chat.routes" in server
    assert layer_of("voice.store.sessions") < layer_of("voice.turns.engine") < layer_of("voice.chat.routes")
    assert layer_of("voice") == layer_of("voice.text.clock") and layer_of("voice.new_module") is None

"""``fedapp new NAME``: a Flower app folder that runs fedapp's ServerApp and ClientApp.

Its ``pyproject.toml`` names fedapp as its dependency and fedapp's apps as its components, and
holds the whole run config with fedapp's defaults, each key with the first sentence of its
documentation, written from the registry (``fedapp.runtime.registry.all_keys``), the one schema the
ServerApp and ClientApps parse with. ``app-dir`` records the folder, so that relative paths of the
run config are read there under plain `flwr run` too, whose ServerApp runs where the local SuperLink
was started.
"""

from __future__ import annotations

import re
from pathlib import Path

from fedapp.core.config import ConfigError, Key
from fedapp.runtime.appdir import FEDAPP_SERVERAPP, toml_value

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
#: the column the comments start at, as in fedapp's own pyproject.toml
COMMENT_AT = 33

HEADER = '''# A Flower app running fedapp's ServerApp and ClientApp, written by `fedapp new`.
#   fedapp run {name}                local simulation, num-clients SuperNodes; the run config checked first
#   flwr run {name} --stream         the same app through Flower's CLI and its local federation
# `fedapp list` shows every algorithm and key; docs: fedapp's README and docs/flower-library.md.

[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{name}"
version = "1.0.0"
description = "A Flower app of fedapp's algorithms"
# simulations need Flower's simulation engine too: pip install 'fedapp[simulation]'
dependencies = ["fedapp"]

[tool.hatch.build.targets.wheel]
bypass-selection = true

[tool.flwr.app]
publisher = "fedapp"

[tool.flwr.app.components]
serverapp = "{serverapp}"
clientapp = "fedapp.runtime.client_app:app"

# Flower's default local federation (`flwr run {name}`) has 2 SuperNodes, as num-clients here;
# for more, set options.num-supernodes of [superlink.local] in $FLWR_HOME/config.toml to num-clients
# (`fedapp run` starts num-clients SuperNodes itself).
[tool.flwr.app.config]
'''

GITIGNORE = "/results/\n__pycache__/\n"


def first_sentence(key: Key, width: int = 100) -> str:
    """The key's documentation up to its first full stop (a long one up to its first ';' or ':'), with
    its choices where it has a few."""
    text = " ".join(key.doc.split(". ")[0].split()).rstrip(".")
    if len(text) > width:
        text = re.split(r"[;:] ", text)[0]
    if len(text) > width:
        text = text[:width].rsplit(" ", 1)[0] + " ..."
    if key.choices is not None and not callable(key.choices) and len(key.choices) <= 12:
        text += f" ({', '.join(map(str, key.choices))})"
    return text


def config_lines(values: dict[str, object] | None = None) -> list[str]:
    """``key = default  # doc`` for every run-config key, common keys first, then each algorithm's
    under its prefix with a comment naming the algorithms that read them; ``values`` replace defaults."""
    from fedapp.runtime.registry import all_keys, declared

    users: dict[str, list[str]] = {}
    for name, (settings, _) in declared().items():
        users.setdefault(settings.prefix, []).append(name)
    lines, prefix = [], ""
    for full, key in all_keys().items():
        head = full.rpartition(".")[0]
        if head and head != prefix:
            lines.append(f"# {head}.*: {', '.join(users.get(head, [head]))}")
        prefix = head
        value = toml_value((values or {}).get(full, key.default))
        lines.append(f"{f'{full} = {value}':<{COMMENT_AT - 1}} # {first_sentence(key)}")
    return lines


def new_app(path: Path) -> Path:
    """Write the app folder ``path`` (its last part names the app); ConfigError where the name is no
    project name or the folder exists and is not empty."""
    name = path.name
    if not NAME.fullmatch(name):
        raise ConfigError(f"fedapp new {str(path)!r}: an app's name starts with a letter and has letters, digits, "
                          "'-' and '_' only")
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ConfigError(f"fedapp new {str(path)!r}: the folder exists and is not empty")
    path.mkdir(parents=True, exist_ok=True)
    folder = path.resolve()
    text = HEADER.format(name=name, serverapp=FEDAPP_SERVERAPP)
    (folder / "pyproject.toml").write_text(text + "\n".join(config_lines({"app-dir": str(folder)})) + "\n")
    (folder / ".gitignore").write_text(GITIGNORE)
    return folder

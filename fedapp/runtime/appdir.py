"""A Flower app folder as the launcher reads it: its run config table, its components, the files
`flwr run` packs into its bundle, and the ``--run-config`` overrides given on top of the table."""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from fedapp.core.config import ConfigError

#: the ServerApp a fedapp app runs: its run config is fedapp's, checked before submission
FEDAPP_SERVERAPP = "fedapp.runtime.server_app:app"


def flat(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A TOML table's keys as Flower's run config names them: ``{"a": {"b": 1}}`` as ``a.b``."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        out.update(flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


def read_app(app: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The app folder's run config table (flattened) and its components, from its pyproject.toml;
    ConfigError (one line) where the folder is no Flower app."""
    path = app / "pyproject.toml"
    try:
        doc = tomllib.loads(path.read_text())
        flower = doc["tool"]["flwr"]["app"]
        return flat(flower.get("config", {})), dict(flower["components"])
    except OSError:
        raise ConfigError(f"{app}: no pyproject.toml, so no Flower app folder (`fedapp new NAME` makes one)") from None
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as err:
        raise ConfigError(f"{path}: no Flower app ([tool.flwr.app] with its components): "
                          f"{type(err).__name__}: {err}") from None


def serves_fedapp(components: dict[str, str]) -> bool:
    """Whether the app runs fedapp's ServerApp, whose run config the launcher checks before submitting."""
    return components.get("serverapp", "").replace(" ", "") == FEDAPP_SERVERAPP


def app_files(root: Path) -> dict[str, Path]:
    """What Flower's ``collect_files`` gives ``flwr run`` to build the app's FAB from (every file under
    ``root`` but symlinks and what resolves outside it), without walking into the directories that
    .gitignore leaves out, whose files the FAB's rules drop: with the .venv inside the checkout that is
    42,000 files and 2.6 CPU s of `flwr run`'s start, for the same 72 files in the FAB."""
    from fedapp.core.compat import gitignore_matcher

    root = root.resolve()
    ignored = gitignore_matcher(root / ".gitignore")
    files: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel = Path(dirpath).relative_to(root)
        dirnames[:] = [d for d in dirnames if not ignored.match_file(f"{(rel / d).as_posix()}/")]
        for name in filenames:
            path = Path(dirpath) / name
            if not path.is_symlink() and path.resolve().is_relative_to(root):
                files[path.relative_to(root).as_posix()] = path
    return files


_TOKEN = re.compile(r"""(?P<key>[^\s=]+)=(?P<value>'[^']*'|"[^"]*"|\S+)|(?P<file>\S+\.toml)""")


def toml_value(value) -> str:
    """A value as a TOML literal for ``flwr run --run-config``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def run_config_overrides(run_config: str | list[str]) -> dict:
    """The keys ``--run-config`` sets: TOML files (their tables flattened, ``a.b = 1`` as
    ``a.b``) and ``k=v`` pairs, later ones winning, so a file can be combined with overrides:
    ``--run-config "paper.toml num-server-rounds=5"``. Each file and each pair is read by Flower's
    own parser (`flwr run` takes a file or pairs, not both)."""
    from fedapp.core.compat import parse_config_args

    values: dict = {}
    for arg in [run_config] if isinstance(run_config, str) else run_config:
        rest = arg
        for m in _TOKEN.finditer(arg):
            rest = rest.replace(m.group(0), "", 1)
            if m.group("file") and not Path(m.group("file")).expanduser().is_file():
                raise ConfigError(f"--run-config: no TOML file {m.group('file')!r}")
            try:
                values.update(parse_config_args([m.group(0)]))
            except ValueError as err:  # a file that is not TOML
                raise ConfigError(f"--run-config: cannot read {m.group(0)!r}: {err}") from None
            except Exception:  # Flower's parser raises click's ClickException for a value that is not TOML
                raise ConfigError(f"--run-config: cannot read {m.group(0)!r}: the value must be a TOML "
                                  "bool, number or quoted string, e.g. strategy='fedprox'") from None
        if rest.strip():
            raise ConfigError(f"--run-config: cannot read {rest.strip()!r}: expected key=value pairs "
                              "or a .toml file")
    return values


"""Every use of a Flower module or behaviour that is not Flower's public API, in one place.

fedapp builds on Flower's public API (``flwr.app``, ``flwr.serverapp``, ``flwr.clientapp``). What
it needs beyond that is reached through the functions here, each with its own test
(``tests/test_library_compat.py``), so a Flower release that changes one of them fails that test
and nothing else needs reading. The ``flwr`` pin in ``pyproject.toml`` covers the releases these
tests passed on.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID, SType

#: the node id a ServerApp's messages come from (``flwr.common.constant``)
SERVER_NODE_ID: int = SUPERLINK_NODE_ID
#: the storage type of an Array holding ``np.save`` bytes (``flwr.common.constant.SType``)
NUMPY_STYPE: str = SType.NUMPY
#: what a Flower mod's ``call_next`` is (as ``flwr.clientapp.typing.ClientAppCallable``)
ClientAppCallable = Callable[[Message, Context], Message]

#: what Flower's ClientApp raises for a message whose type it registers no function for
#: (``flwr.clientapp.ClientApp.__call__``): "No query function registered with name 'default'"
_NO_HANDLER = "No {} function registered"


def flower_grids() -> tuple[type, type]:
    """Flower's HTTP grid (deployments) and in-memory grid (simulations), from ``flwr.superlink.grid``.
    Imported when a server needs them: ``flwr.superlink`` brings the SuperLink's state machinery
    (about 0.9 s of CPU), which every ClientApp process would otherwise load, as parsing a run
    config imports the round driver."""
    from flwr.superlink.grid import HttpGrid, InMemoryGrid

    return HttpGrid, InMemoryGrid


def lacks_handler(error: Error, message_type: str) -> bool:
    """Whether an error reply says the node's ClientApp registers no function for ``message_type``
    (``query``: a plain Flower ClientApp with only ``@app.train()`` and ``@app.evaluate()``), as
    Flower reports it: the ClientApp's ValueError, wrapped by the SuperNode or the simulation."""
    return _NO_HANDLER.format(message_type) in (error.reason or "")


def app_component(name: str) -> str | None:
    """The ``name`` component (``serverapp``, ``clientapp``) of the Flower app this process runs: the
    ``[tool.flwr.app.components]`` table of the app's ``pyproject.toml``, in the folder that Flower
    puts first on ``sys.path`` when it loads the app (``flwr.supercore.object_ref``) in the ServerApp's
    process, of a simulation and of a deployment alike. None where no folder on ``sys.path`` holds a
    Flower app's pyproject.toml."""
    for entry in sys.path:
        path = Path(entry or ".") / "pyproject.toml"
        if not path.is_file():
            continue
        try:
            components = tomllib.loads(path.read_text())["tool"]["flwr"]["app"]["components"]
        except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError):
            continue
        return components.get(name)
    return None


def answers(app: ClientApp, message_type: str) -> bool:
    """Whether ``app`` has a function for messages of ``message_type`` (its default action): one
    registered with ``@app.query()`` and the like (``ClientApp._registered_funcs``), or a legacy
    ``client_fn`` (``ClientApp._call``), which takes every message type."""
    return app._call is not None or f"{message_type}.default" in app._registered_funcs


def engine_pickup() -> Callable:
    """The function the thread of Flower's simulation engine runs to hand the ServerApp's messages to
    the simulated clients (``flwr.server.superlink.fleet.vce.vce_api.add_messages_to_queue``); its
    arguments include the ``threading.Event`` that stops it (``fedapp.server.pickup`` hooks its wait)."""
    from flwr.server.superlink.fleet.vce import vce_api

    return vce_api.add_messages_to_queue


def supernode_parser():
    """The argument parser of ``flower-supernode`` (``flwr.supernode.cli.flower_supernode``), so a
    SuperNode's command line reads with the defaults the SuperNode applied (``fedapp.runtime.watchdog``)."""
    from flwr.supernode.cli.flower_supernode import _parse_args_run_supernode

    return _parse_args_run_supernode()


def superlink_parser():
    """The argument parser of ``flower-superlink`` (``flwr.superlink.cli.flower_superlink``): whether a
    SuperLink authenticates SuperNodes, read from its command line (``fedapp.runtime.watchdog``)."""
    from flwr.superlink.cli.flower_superlink import _parse_args_run_superlink

    return _parse_args_run_superlink()


def encode(content: RecordDict) -> bytes:
    """A message content as the transport carries it (Flower's protobuf serialisation)."""
    from flwr.common.serde import recorddict_to_proto

    return recorddict_to_proto(content).SerializeToString()


def decode(blob: bytes) -> RecordDict:
    """The inverse of ``encode``."""
    from flwr.common.serde import recorddict_from_proto
    from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict

    return recorddict_from_proto(ProtoRecordDict.FromString(blob))


def task_identity() -> tuple[int, int, int]:
    """The task, run and node id that Messages built in this process take (``flwr.supercore.task_identity``)."""
    from flwr.supercore.task_identity import TaskIdentity

    return TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id


def set_task_identity(task_id: int, run_id: int, node_id: int) -> None:
    """Messages built in this process from now on are of this task, run and node (as in a ServerApp)."""
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = task_id, run_id, node_id


def gitignore_matcher(gitignore: Path):
    """The pathspec of a ``.gitignore`` file as `flwr run` reads it for the app bundle (``flwr.cli.utils``):
    ``matcher.match_file(path)``."""
    from flwr.cli.utils import build_pathspec, load_gitignore_patterns

    return build_pathspec(load_gitignore_patterns(gitignore))


def flwr_cli(files: dict[str, Path], root: Path) -> Callable[[list[str]], int]:
    """Flower's CLI (``flwr.cli.app.app``, about 1 CPU s to import) with the app's FAB built now
    from ``files`` (``flwr.cli.build.build_fab_from_files``; ``fedapp.runtime.launch.app_files``): `flwr run`
    of ``root`` takes that FAB in place of building it from disk (``flwr.cli.run.run``'s
    ``build_fab_from_disk``, replaced in this process). Returns the function that runs one command,
    ``cli(["run", ...])``, as the ``flwr`` executable would (it raises SystemExit with its exit code)."""
    import importlib

    from flwr.cli.app import app
    from flwr.cli.build import build_fab_from_files

    run = importlib.import_module("flwr.cli.run.run")  # the module; flwr.cli.run.run is the command
    fab, build = build_fab_from_files(files)[0], run.build_fab_from_disk
    root = root.resolve()
    run.build_fab_from_disk = lambda path: fab if Path(path).resolve() == root else build(path)

    def cli(args: list[str]) -> int:
        sys.argv = ["flwr", *args]
        return app()

    return cli


def parse_config_args(args: list[str]) -> dict[str, Any]:
    """``--run-config`` arguments (a TOML file, or ``KEY=VALUE`` pairs) as `flwr run` reads them, flat
    keys (``flwr.common.config.parse_config_args``)."""
    from flwr.common.config import parse_config_args as parse

    return parse(args)


def trim_mean(array: np.ndarray, fraction: float) -> np.ndarray:
    """Flower's trimmed mean along axis 0, ``fraction`` cut at each end (FedTrimmedAvg's
    ``flwr.serverapp.strategy.fedtrimmedavg.trim_mean``)."""
    from flwr.serverapp.strategy.fedtrimmedavg import trim_mean as trimmed

    return trimmed(array, fraction)


def select_multikrum(contents: list[RecordDict], num_malicious: int, num_select: int) -> list[RecordDict]:
    """The ``num_select`` replies Flower's Multi-Krum keeps, ``num_malicious`` assumed Byzantine
    (``flwr.serverapp.strategy.multikrum.select_multikrum``)."""
    from flwr.serverapp.strategy.multikrum import select_multikrum as select

    return select(contents, num_malicious, num_select)


def flatten_dict(values: dict[str, Any]) -> dict[str, Any]:
    """Nested TOML tables as Flower flattens a run config (``a.b = 1`` as ``a.b``; ``flwr.common.config``)."""
    from flwr.common.config import flatten_dict as flatten

    return flatten(values)


def zero_norm_clipping() -> None:
    """Flower's FlatClip (``clip_inputs_inplace``, ``adaptive_clip_inputs_inplace``) divides the
    clipping norm by the update's norm, so an update of norm 0 (a reply equal to the model it was
    sent) raises ZeroDivisionError: it stops a run under server-side dp (any one client can stop it
    so) and fails that client's reply under client-side dp. Clipped, such an update is itself and
    counts as not clipped: this installs Flower's arithmetic with that case, for its wrappers and its
    clipping mods, once per process."""
    from flwr.supercore import differential_privacy as dp

    def clip(arrays, clipping_norm: float) -> bool:
        norm = dp.get_norm(arrays)
        scale = min(1, clipping_norm / norm) if norm > 0 else 1
        for array in arrays:
            array *= scale
        return scale < 1

    if getattr(dp.clip_inputs_inplace, "zero_norm", False):
        return
    clip.zero_norm = True  # type: ignore[attr-defined]
    # the clipping mods and the fixed wrappers reach them through the module; the adaptive wrapper, where this
    # process runs a ServerApp (a ClientApp imports none), took its own name for the adaptive one
    dp.clip_inputs_inplace = dp.adaptive_clip_inputs_inplace = clip
    if (wrapper := sys.modules.get("flwr.serverapp.strategy.dp_adaptive_clipping")) is not None:
        wrapper.adaptive_clip_inputs_inplace = clip

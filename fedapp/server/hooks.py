"""What the round machinery reads and calls on a strategy: the hooks every strategy has
(``RoundHooks``, which ``strategies.base.FedStrategy`` implements) and those an algorithm adds as its
own methods where one needs them (``OwnHooks``, found with ``own_hook``). Declared here so the server
layer needs no import of the strategy's class."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from flwr.app import ArrayRecord
from flwr.serverapp import Grid

from fedapp.core.config import RunConfig
from fedapp.core.data import Dataset
from fedapp.core.records import Payload, Tensors
from fedapp.server.replies import Reply, Spec


class RoundHooks(Protocol):
    """What the round machinery reads and calls on the strategy it runs (``strategies.base.FedStrategy``
    implements it): the settings and algorithm state it keeps, and the hooks an algorithm overrides
    (``begin``, the payload and config hooks, ``reply_spec``, ``aggregate``, ``reference``,
    ``central_state``); the run state the driver writes (``clients``, ``history``, ``totals``) is the
    driver's own (``fedapp.server.rounds.Driver``)."""

    cfg: RunConfig
    model: torch.nn.Module
    dataset: Dataset | None  # the global test set of central-eval
    rng: np.random.Generator
    unseen: frozenset[int]  # partition ids held out as new clients
    base_config: dict[str, dict[str, Any]]  # the config sent with every "train" / "evaluate" message
    run_key: str
    state_rounds: dict[int, int]  # partition id -> the round of the client state it holds
    kept_state_rounds: dict[int, int]
    results_path: Path | None
    # partition id -> the arrays its reply must carry, of the last training / evaluation messages
    expected: dict[str, dict[int, Spec | None]]
    client_evals: list[tuple[int, bool, dict[str, float]]]  # the last evaluation's (pid, unseen, metrics)

    def plain_clients(self) -> bool: ...
    def client_need(self) -> str: ...
    def summary(self) -> None: ...
    def begin(self, phase: str, server_round: int, grid: Grid) -> None: ...
    def broadcast_payload(self, phase: str, server_round: int) -> Payload: ...
    def shared_payloads(self, phase: str, server_round: int) -> Payload: ...
    def client_payload(self, phase: str, pid: int, server_round: int) -> Payload: ...
    def client_config(self, phase: str, pid: int, server_round: int) -> dict[str, Any]: ...
    def reply_spec(self, pid: int, server_round: int) -> Spec: ...
    def reference(self, pid: int, name: str) -> Tensors | None: ...
    def aggregate(self, server_round: int, replies: list[Reply]) -> None: ...
    def global_arrays(self) -> ArrayRecord | None: ...
    def central_state(self) -> Tensors | None: ...


class OwnHooks(Protocol):
    """Hooks an algorithm may add as its own methods, where one algorithm needs them (so the base
    offers no default); the driver and the results find them with :func:`own_hook` only.

    A round the algorithm runs itself, where one configure/aggregate pair is not its round (PeFLL and
    pFedHN: several exchanges a step through ``Driver.round_trip``), replaces the driver's
    ``train_round`` / ``evaluate_round``; Flower's loop cannot drive such a strategy
    (``FedStrategy.flower_loop``)."""

    def train_round(self, server_round: int, grid: Grid) -> dict[str, float]: ...
    def evaluate_round(self, server_round: int, grid: Grid) -> dict[str, float]: ...
    def round_row(self, server_round: int) -> dict[str, Any]:
        """Entries of a training round's row besides aggregate_train's metrics (HCCT: the groups)."""
    def extra_results(self) -> dict[str, Any]:
        """Entries merged into rounds.json (HCCT: the groups of every round)."""
    def train_pool(self) -> list[int]:
        """Partition ids that take part in training (Local: every client, new ones included)."""
    def present(self, server_round: int, pool: list[int]) -> list[int]:
        """The clients of ``pool`` that take part in ``server_round`` (HCCT: those arrived by then)."""


def own_hook(strategy: object, name: str) -> Callable | None:
    """The strategy's own hook ``name`` (one that ``OwnHooks`` declares), or None when it has none."""
    if name not in OwnHooks.__dict__:
        raise AttributeError(f"{name} is no hook of OwnHooks")
    return getattr(strategy, name, None)

"""What the round machinery reads and calls on a strategy: the hooks every strategy has
(``RoundHooks``, which ``strategies.base.FedStrategy`` implements) and those an algorithm adds as its
own methods where one needs them (``OwnHooks``, found with ``own_hook``). Declared here so the server
layer needs no import of the strategy's class."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord
from flwr.serverapp import Grid

from fedapp.core.config import RunConfig
from fedapp.core.records import Tensors
from fedapp.server.replies import Spec


class RoundHooks(Protocol):
    """What the round machinery reads and calls on the strategy it runs (``strategies.base.FedStrategy``
    implements it): the settings and algorithm state it keeps, Flower's configure/aggregate pair
    and the round's other hooks; the run state the driver writes (``clients``, ``history``,
    ``totals``) is the driver's own (``fedapp.server.rounds.Driver``)."""

    cfg: RunConfig
    rng: np.random.Generator
    unseen: frozenset[int]  # partition ids held out as new clients
    base_config: dict[str, dict[str, Any]]  # the config sent with every "train" / "evaluate" message
    run_key: str
    state_rounds: dict[int, int]  # partition id -> the round of the client state it holds
    kept_state_rounds: dict[int, int]
    results_path: Path | None
    # partition id -> the arrays its reply must carry, of the last configure_train / configure_evaluate
    expected: dict[str, dict[int, Spec | None]]
    client_evals: list[tuple[int, bool, dict[str, float]]]  # the last evaluation's (pid, unseen, metrics)

    def plain_clients(self) -> bool: ...
    def client_need(self) -> str: ...
    def global_arrays(self) -> ArrayRecord | None: ...
    def reference(self, pid: int, name: str) -> Tensors | None: ...
    def configure_train(self, server_round: int, arrays: ArrayRecord | None, config: Mapping,
                        grid: Grid) -> list[Message]: ...
    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]: ...
    def configure_evaluate(self, server_round: int, arrays: ArrayRecord | None, config: Mapping,
                           grid: Grid) -> list[Message]: ...
    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None: ...
    def evaluate_central(self) -> dict[str, float]: ...
    def summary(self) -> None: ...


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

"""The loop of a run: its rounds and evaluations, each one's row recorded, Flower's ``Result`` returned.

``run`` takes a strategy's :class:`~fedapp.server.rounds.Driver` through discovery, round 0's
evaluation and every round from the first one to run (``start_round``: a resumed run's next), and
tells the sites at the end (``end_of_run``); each row goes to ``record``.
"""

from __future__ import annotations

import time
from logging import INFO, WARNING
from typing import TYPE_CHECKING, Any

import torch
from flwr.app import ConfigRecord, MessageType, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result

from fedapp.core.compat import flower_grids
from fedapp.server.replies import scalars
from fedapp.server.transport import send_and_receive

if TYPE_CHECKING:
    from fedapp.server.rounds import Driver


def run(driver: Driver, grid: Grid, evaluate_fn, writer, start_round: int) -> Result:
    """All rounds from ``start_round``: each one's training, evaluation (every eval-every) and
    ``evaluate_fn``, its row recorded; Flower's ``Result`` of the rounds run."""
    result = Result()
    t_start = open_run(driver, grid, evaluate_fn, writer, result)
    empty = 0  # rounds in a row without a valid training reply
    for rnd in range(start_round, driver.cfg.num_server_rounds + 1):
        t0 = time.time()
        row = train_row(driver, rnd, grid, result)
        row["train-seconds"] = time.time() - t0
        empty = empty + 1 if row.get("replies") == 0 else 0
        if empty and (rnd == start_round or empty == driver.cfg.max_empty_rounds):
            fail_empty(driver, rnd, start_round, empty)
        row.update(evaluate_row(driver, rnd, grid, evaluate_fn, result))
        close_row(driver, row, rnd)
        row["round-seconds"] = time.time() - t0
        row["wall-time"] = time.time() - t_start
        record(driver, row, writer, result)
    end_of_run(driver, grid)
    arrays = driver.strategy.global_arrays()
    if arrays is not None:
        result.arrays = arrays
    return result


def open_run(driver: Driver, grid: Grid, evaluate_fn, writer, result: Result) -> float:
    """Before the first round: the clients discovered (waiting up to node-wait-timeout for
    num-clients), and round 0's row where the run has none; the run's start on the wall clock."""
    strategy, cfg = driver.strategy, driver.cfg
    strategy.results_path = writer.path if writer is not None else None
    if isinstance(grid, flower_grids()[1]):
        # a simulation's ServerApp shares the cores with the Ray workers: a second torch
        # thread only spins against them (aggregation took 2/3 of the process's time)
        torch.set_num_threads(1)
    strategy.summary()
    driver.nodes.discover(grid, wait=cfg.node_wait_timeout)
    if len(driver.clients) < cfg.num_clients:
        log(WARNING, "only %d of %d clients connected; going on with those", len(driver.clients), cfg.num_clients)
    if not driver.train_pool():
        raise RuntimeError("no training client is connected")
    t_start = time.time() - (driver.history[-1]["wall-time"] if driver.history else 0.0)
    if not driver.history:  # a run resumed from its round-0 checkpoint has this row
        row = {"round": 0, **driver.evaluate_central(), "wall-time": 0.0}
        row.update(server_evaluate(driver, 0, evaluate_fn, result))
        record(driver, row, writer, result)
    return t_start


def train_row(driver: Driver, rnd: int, grid: Grid, result: Result) -> dict[str, Any]:
    """Round ``rnd``'s training (the nodes that joined since the last round discovered first): the
    row so far, its named metrics in Flower's ``Result``."""
    driver.wire.traffic.clear()
    driver.wire.dropped.clear()
    driver.clipped = 0
    driver.nodes.discover(grid)  # nodes that joined since the last round
    driver.named.clear()
    fit = driver.train_round(rnd, grid)
    result.train_metrics_clientapp[rnd] = MetricRecord({**driver.named.pop("train", {}), **scalars(fit)})
    return {"round": rnd, **fit}


def fail_empty(driver: Driver, rnd: int, start_round: int, empty: int) -> None:
    """No valid reply in a run's first round is a set-up error (a device that is not there, missing
    data, clients that all answer wrongly), and max-empty-rounds such rounds in a row a run that
    learns nothing: it fails, saying why, instead of reporting success."""
    what = "its first round" if rnd == start_round else f"{empty} rounds in a row (max-empty-rounds)"
    reasons = ", ".join(f"{k}: {v}" for k, v in sorted(driver.wire.dropped.items())) or "none"
    raise RuntimeError(f"round {rnd}: no valid training reply in {what}, so the run stops; "
                       f"dropped replies by reason: {reasons}")


def evaluate_row(driver: Driver, rnd: int, grid: Grid, evaluate_fn, result: Result) -> dict[str, Any]:
    """Round ``rnd``'s evaluations: the federated one every eval-every rounds and at the last,
    and ``evaluate_fn``'s."""
    out: dict[str, Any] = {}
    if rnd % driver.cfg.eval_every == 0 or rnd == driver.cfg.num_server_rounds:
        out.update(driver.evaluate_round(rnd, grid))
        if named := driver.named.pop("evaluate", None):
            result.evaluate_metrics_clientapp.setdefault(rnd, MetricRecord()).update(named)
    out.update(server_evaluate(driver, rnd, evaluate_fn, result))
    return out


def close_row(driver: Driver, row: dict[str, Any], rnd: int) -> None:
    """The round's traffic, drops and clipped replies in its row, and the partitions that lost
    their client state (each reported once)."""
    traffic = driver.wire.traffic
    driver.totals.update(traffic)
    row.update(traffic)
    row.update({f"total-{k}": v for k, v in driver.totals.items()})
    row["dropped-replies"] = sum(driver.wire.dropped.values())
    row["dropped-reasons"] = dict(driver.wire.dropped)
    row["clipped-replies"] = driver.clipped
    if lost := sorted(driver.state_lost - driver.reported_lost):
        log(WARNING, "round %d: partition(s) %s no longer hold the client state this run builds on "
            "(a site lost its state-dir, or a simulation was resumed in a new run): they restart it from "
            "scratch", rnd, ", ".join(map(str, lost)))
        row["state-lost"] = lost
        driver.reported_lost.update(lost)
    driver.state_lost.clear()


def end_of_run(driver: Driver, grid: Grid) -> None:
    """The run has finished: its client state files are removed at the sites (``end-of-run``),
    or with ``keep-client-state`` (to resume the run with more rounds later) all but the last
    version. Sites that do not answer within a minute keep their files."""
    if not driver.state_holders:
        return
    keep = driver.cfg.keep_client_state
    contents = {pid: RecordDict({"config": ConfigRecord({"end-of-run": True, "keep-client-state": keep})})
                for pid, c in driver.clients.items() if not c.plain}
    replies = [m for m in send_and_receive(grid, driver.wire.messages(contents, MessageType.QUERY),
                                           min(driver.cfg.round_timeout, 60.0)) if m.has_content()]
    log(INFO, "end of run: %d of %d clients removed %d client state files%s", len(replies), len(contents),
        sum(int(m.content["metrics"]["removed-files"]) for m in replies),
        " (keep-client-state: all but the last version)" if keep else "; keep-client-state=true keeps them")


def server_evaluate(driver: Driver, server_round: int, evaluate_fn, result: Result) -> dict[str, float]:
    """Flower's ``evaluate_fn(round, arrays)`` on the global model; its metrics go to the
    result's ServerApp-side metrics and to the round's row as ``server-<name>``."""
    if evaluate_fn is None:
        return {}
    metrics = evaluate_fn(server_round, driver.strategy.global_arrays())
    if metrics is None:
        return {}
    result.evaluate_metrics_serverapp.setdefault(server_round, MetricRecord()).update(metrics)
    return {f"server-{k}": v for k, v in metrics.items()}


def record(driver: Driver, row: dict[str, Any], writer, result: Result | None = None) -> None:
    """Append ``row`` to the run's history, its evaluations to Flower's ``result``, log its line
    and hand it to the results ``writer``."""
    driver.history.append(row)
    if result is not None:  # the evaluations of the row in Flower's result
        for prefix, into in (("fed-", result.evaluate_metrics_clientapp),
                             ("central-", result.evaluate_metrics_serverapp)):
            metrics = scalars({k: v for k, v in row.items() if k.startswith(prefix)})
            if metrics:
                into.setdefault(row["round"], MetricRecord()).update(metrics)
    log(INFO, row_line(row, driver.cfg.num_server_rounds))
    if writer is not None:
        writer.add(row, driver.strategy)


def row_line(row: dict[str, Any], num_rounds: int) -> str:
    """A row's log line: the round, the time elapsed and left, and its main numbers."""
    parts = [f"round {row['round']}/{num_rounds}"]
    if row["round"] and row.get("wall-time"):  # elapsed, and the rest at the mean pace so far
        left = row["wall-time"] / row["round"] * (num_rounds - row["round"])
        parts.append(f"elapsed {row['wall-time']:.0f} s, about {left:.0f} s left")
    for key in ("train-loss", "central-accuracy", "fed-accuracy", "fed-unseen-accuracy", "train-bytes-down",
                "train-bytes-up", "round-seconds", "dp-epsilon"):
        if key in row:
            v = row[key]
            parts.append(f"{key} {v:.4f}" if isinstance(v, float) else f"{key} {v}")
    if row.get("dropped-replies"):
        parts.append(f"dropped {row['dropped-reasons']}")
    return " | ".join(parts)

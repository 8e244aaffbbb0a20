"""ServerApp: validates the run config, builds the strategy and runs it."""

from __future__ import annotations

from logging import WARNING

from flwr.app import Context
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp
from flwr.superlink.grid import InMemoryGrid

from fedapp import checkpoint, preflight, registry
from fedapp.config import RunConfig
from fedapp.experiment import dataset, model_for
from fedapp.results import ResultsWriter

app = ServerApp()


def build_strategy(cfg: RunConfig):
    """The configured strategy with its initial model and the global test set."""
    ds = dataset(cfg)
    return registry.get(cfg.strategy).strategy(cfg, model_for(cfg, ds), ds)


def run(grid: Grid, run_config):
    """Run the configured strategy to the end, or on from ``resume-from``; returns it (its
    ``history`` holds the rows)."""
    # bad input stops here, before any training; a simulation's clients share this machine and data
    cfg = preflight.check(run_config, local=isinstance(grid, InMemoryGrid))
    if cfg.central_eval and not len(dataset(cfg).test_y):
        log(WARNING, "dataset %r has no test split: central evaluation is off (central-eval=false)", cfg.dataset)
        cfg = cfg.replace(central_eval=False)
    strategy = build_strategy(cfg)
    start = checkpoint.resume(strategy, cfg.resume_from) if cfg.resume_from else 1
    writer = ResultsWriter(cfg, rows=strategy.history)
    strategy.start(grid, writer=writer, start_round=start)
    return strategy


@app.main()
def main(grid: Grid, context: Context) -> None:
    run(grid, context.run_config)

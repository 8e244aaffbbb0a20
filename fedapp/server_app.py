"""ServerApp: validates the run config, builds the strategy and runs it."""

from __future__ import annotations

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedapp import checkpoint, registry
from fedapp.config import RunConfig, parse_run_config
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
    cfg = parse_run_config(run_config)  # bad input stops here, before any training
    strategy = build_strategy(cfg)
    start = checkpoint.resume(strategy, cfg.resume_from) if cfg.resume_from else 1
    writer = ResultsWriter(cfg, rows=strategy.history)
    try:
        strategy.start(grid, writer=writer, start_round=start)
    finally:
        writer.close(strategy)
    return strategy


@app.main()
def main(grid: Grid, context: Context) -> None:
    run(grid, context.run_config)

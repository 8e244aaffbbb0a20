"""ServerApp: validates the run config, builds the strategy and runs it."""

from __future__ import annotations

from logging import INFO, WARNING

from flwr.app import Context
from flwr.common import log
from flwr.serverapp import Grid, ServerApp

from fedapp.runtime import checkpoint, preflight, registry
from fedapp.server import sites
from fedapp.core.compat import flower_grids, superlink_parser
from fedapp.core.config import ConfigError, RunConfig
from fedapp.core.experiment import dataset, model_for, partitions, server_dataset
from fedapp.core.files import DiskFull
from fedapp.runtime.results import ResultsWriter
from fedapp.runtime.watchdog import ancestor

app = ServerApp()
FINAL_METRICS = ("central-accuracy", "fed-accuracy", "fed-seen-accuracy", "fed-unseen-accuracy", "central-loss",
                 "fed-loss")


def simulated(grid: Grid) -> bool:
    """Whether the clients run on this machine on partitions of this run config's dataset (a
    simulation), rather than on sites with their own data and devices."""
    contexts = getattr(grid, "contexts", None)  # fedapp.runtime.inprocess's InProcessGrid (which imports this module)
    if contexts is not None:
        return all("num-partitions" in c.node_config for c in contexts.values())
    return isinstance(grid, flower_grids()[1])


def superlink_authenticates(pid: int | None = None) -> bool:
    """Whether the SuperLink that started process ``pid`` (this ServerApp, through the SuperLink's
    SuperExec: the nearest ``flower-superlink`` ancestor) runs with ``--enable-supernode-auth``: then
    the key it reports for a node is one the operator registered. False without such an ancestor (a
    SuperExec run on its own)."""
    if (found := ancestor("flower-superlink", pid)) is None:
        return False
    try:
        return bool(superlink_parser().parse_known_args(found[1])[0].enable_supernode_auth)
    except SystemExit:  # a command line Flower's parser refuses
        return False


def build_strategy(cfg: RunConfig, local: bool = True):
    """The configured strategy with its initial model and the global test set (``server_dataset``: none
    where a deployment's server declares the shapes and evaluates nothing centrally)."""
    ds = server_dataset(cfg, local)
    return registry.get(cfg.strategy).strategy(cfg, model_for(cfg, ds), ds)


def run(grid: Grid, run_config):
    """Run the configured strategy to the end, or on from ``resume-from``; returns it (its
    ``history`` holds the rows)."""
    # bad input stops here, before any training; a simulation's clients share this machine and data
    cfg = preflight.check(run_config, local=simulated(grid))
    if cfg.central_eval and not len(dataset(cfg).test_y):
        log(WARNING, "dataset %r has no test split: central evaluation is off (central-eval=false)", cfg.dataset)
        cfg = cfg.replace(central_eval=False)
    if cfg.site_keys and simulated(grid):
        raise ConfigError("run config 'site-keys' binds partitions to SuperNode keys: a simulation's clients have "
                          "none; leave it out")
    strategy = build_strategy(cfg, simulated(grid))
    if cfg.site_keys:
        strategy.driver.nodes.sites = sites.load(cfg.site_keys, cfg.num_clients)
    elif not simulated(grid) and superlink_authenticates():
        strategy.driver.nodes.first_keys = {}  # each partition bound to the first key that claims it
    start = checkpoint.resume(strategy, cfg.resume_from) if cfg.resume_from else 1
    if cfg.resume_from:
        log(INFO, "resuming from %s: rounds 1-%d restored, continuing with round %d of %d", cfg.resume_from,
            start - 1, start, cfg.num_server_rounds)
    writer = ResultsWriter(cfg, rows=strategy.history, run_key=strategy.run_key)
    log(INFO, "results: %s", writer.path.resolve())
    try:
        if simulated(grid):
            ds = dataset(cfg)
            writer.write_partition(ds.train_y.numpy(), partitions(cfg), ds.num_classes, ds.classes)
        strategy.start(grid, writer=writer, start_round=start)
    except DiskFull as err:  # the last complete checkpoint stays: the run can go on once there is space
        done = writer.checkpointed
        raise RuntimeError(f"{err.strerror}: the run stops; " + (
            "no checkpoint was written" if done is None else
            f"its last complete checkpoint is round {done}: free space and resume with resume-from='{writer.path}'")
        ) from None
    finally:
        writer.close()  # a run that stopped before its last round: its trackers' runs end as failed
    last = strategy.history[-1] if strategy.history else {}
    final = ", ".join(f"{k} {last[k]:.4f}" for k in FINAL_METRICS if k in last)
    log(INFO, "done: %d rounds in %.0f s%s; results in %s", last.get("round", 0), last.get("wall-time", 0.0),
        f"; final {final}" if final else "", writer.path.resolve())
    return strategy


@app.main()
def main(grid: Grid, context: Context) -> None:
    run(grid, context.run_config)

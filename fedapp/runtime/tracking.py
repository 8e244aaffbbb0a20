"""Experiment trackers a run's results are also logged to: TensorBoard (``tensorboard``), MLflow or
Weights & Biases (``tracking``).

The results writer (``fedapp.runtime.results``) drives every tracker through the one interface
:class:`Tracker`: the run config when the tracker starts, each round's row as it is written, the
model files after the last round, and the end of the run. A tracker's run is named after the
results folder and keyed by the server's run key, so a run resumed from its checkpoint goes on
logging into the same tracker run.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from fedapp.core.config import ConfigError, RunConfig

#: the MLflow tag that holds the run key, by which a resumed run finds its MLflow run
RUN_KEY_TAG = "fedapp.run-key"


def reason(err: Exception) -> str:
    """A tracker's error in one line: its type and its message's first line."""
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"


def metrics(row: dict[str, Any]) -> dict[str, float]:
    """The row's numbers, its round aside: what a tracker logs (dicts, lists and flags are no metrics)."""
    return {k: v for k, v in row.items()
            if k != "round" and isinstance(v, (int, float)) and not isinstance(v, bool)}


class Tracker:
    """One tracker of a run; it takes the run config when it starts."""

    def row(self, server_round: int, values: dict[str, float]) -> None:
        """Log one round's ``metrics``."""

    def files(self, paths: list[Path]) -> None:
        """Log the model files written after the last round."""

    def close(self, failed: bool) -> None:
        """End the tracker's run; ``failed``: the run stopped before its last round."""


class TensorBoard(Tracker):
    """Scalars under the run folder's ``tensorboard/``; a resumed run's rounds replace those logged
    after its checkpoint."""

    def __init__(self, path: Path, first_round: int):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(path / "tensorboard"), purge_step=first_round)

    def row(self, server_round, values):
        for key, value in values.items():
            self.writer.add_scalar(key, value, server_round)
        self.writer.flush()

    def close(self, failed):
        self.writer.close()


class MLflow(Tracker):
    """An MLflow run: the tracking store MLflow's ``MLFLOW_TRACKING_URI`` names (a tracking server
    or a local store), else the local store ``results-dir/.mlflow/mlflow.db`` with the files in
    ``results-dir/.mlflow/artifacts`` (hidden, so that ``results-dir/*`` names run folders only); the experiment ``MLFLOW_EXPERIMENT_NAME``, else ``fedapp``. The run
    config becomes the run's parameters, each round's row its metrics at step = round, the model
    files its artifacts."""

    def __init__(self, cfg: RunConfig, name: str, key: str):
        from mlflow.entities import Param
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        store = Path(cfg.results_dir).expanduser().resolve() / ".mlflow"
        if not uri:
            store.mkdir(parents=True, exist_ok=True)
        self.client = client = MlflowClient(uri or f"sqlite:///{store / 'mlflow.db'}")
        experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME", "fedapp")
        if (found := client.get_experiment_by_name(experiment)) is None:
            try:
                client.create_experiment(experiment, None if uri else (store / "artifacts").as_uri())
            except MlflowException:  # another run created it meanwhile
                pass
            found = client.get_experiment_by_name(experiment)
        runs = client.search_runs([found.experiment_id], f"tags.`{RUN_KEY_TAG}` = '{key}'", max_results=1)
        if runs:  # this run, resumed: its parameters are logged (MLflow refuses to change one)
            self.run_id = runs[0].info.run_id
            client.update_run(self.run_id, "RUNNING")
            return
        self.run_id = client.create_run(found.experiment_id, run_name=name, tags={RUN_KEY_TAG: key}).info.run_id
        params = [Param(k, str(v)) for k, v in cfg.as_dict().items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 parameters a call
            client.log_batch(self.run_id, params=params[i:i + 100])

    def row(self, server_round, values):
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, server_round) for k, v in values.items()]
        for i in range(0, len(batch), 1000):  # and at most 1000 metrics
            self.client.log_batch(self.run_id, metrics=batch[i:i + 1000])

    def files(self, paths):
        for path in paths:
            self.client.log_artifact(self.run_id, str(path))

    def close(self, failed):
        self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")


class WandB(Tracker):
    """A Weights & Biases run in the project ``WANDB_PROJECT`` (else ``fedapp``), written under
    ``WANDB_DIR`` (else the run folder's ``wandb/``); W&B's own settings apply (``WANDB_MODE=offline``
    logs to that folder only, for ``wandb sync`` later). The run config is the run's config, each
    round's row a history row with ``round`` as its step, the model files a ``model`` artifact."""

    def __init__(self, cfg: RunConfig, path: Path, name: str, key: str):
        import wandb

        self.id = hashlib.sha1(key.encode()).hexdigest()[:16]  # W&B ids are letters and digits
        self.wandb = wandb
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "fedapp"), name=name, id=self.id,
                              resume="allow", dir=os.environ.get("WANDB_DIR") or str(path))
        # a resumed run may have changed the keys a resume may change (num-server-rounds, ...)
        self.run.config.update(cfg.as_dict(), allow_val_change=True)
        # rounds as the step: a resumed run logs again the rounds after its checkpoint
        self.run.define_metric("round")
        self.run.define_metric("*", step_metric="round")

    def row(self, server_round, values):
        self.run.log({"round": server_round, **values})

    def files(self, paths):
        artifact = self.wandb.Artifact(f"model-{self.id}", type="model")
        for path in paths:
            artifact.add_file(str(path))
        self.run.log_artifact(artifact)

    def close(self, failed):
        self.run.finish(exit_code=1 if failed else 0)


def start(cfg: RunConfig, path: Path, key: str, first_round: int) -> list[Tracker]:
    """The run's trackers, started: TensorBoard with ``tensorboard``, the one ``tracking`` names.
    A tracker that cannot start (no login, a tracking server out of reach) stops the run here, before
    its first round, in one line."""
    out: list[Tracker] = [TensorBoard(path, first_round)] if cfg.tensorboard else []
    if cfg.tracking == "none":
        return out
    try:
        out.append(MLflow(cfg, path.name, key) if cfg.tracking == "mlflow" else WandB(cfg, path, path.name, key))
    except Exception as err:  # each tracker's own errors, of many kinds
        raise ConfigError(f"run config 'tracking' = {cfg.tracking!r}: cannot start it ({reason(err)})") from None
    return out

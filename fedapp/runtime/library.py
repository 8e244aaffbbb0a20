"""fedapp's client updates in your own Flower ClientApp.

Each fedapp strategy has a client (``clients/``) whose local update is the algorithm's client
side: FedSMOO's perturbed, corrected steps and its duals, SCAFFOLD's control variates, FedALS's
local body, PeFLL's embeddings. The functions here run that update for a message of your own
``@app.train()`` / ``@app.evaluate()`` with your model and your data, keep the client's state in
``context.state`` (versioned by round, as fedapp's own ClientApp keeps it) and return the reply
the strategy expects. fedapp's own ClientApp (``fedapp.runtime.client_app``) answers with the same
``answer_train`` / ``answer_evaluate``, only on the data and model its run config names. A
ClientApp of three such calls (``query``, ``train``, ``evaluate``): docs/flower-library.md.

Every setting of the update (learning rate, batch size, local steps, the algorithm's own such as
FedSMOO's ``rho``) comes with the message, from the server's strategy. The node config names the
``partition-id`` the client serves, as in fedapp's own federations.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from flwr.app import Context, Message

from fedapp.runtime import registry
from fedapp.runtime.client_app import answer_evaluate, answer_query, answer_train, partition_id
from fedapp.core.config import RunConfig
from fedapp.core.experiment import ClientData

#: data as the functions take it: an ``(x, y)`` pair of tensors, or an iterable of ``(x, y)``
#: batches such as a torch DataLoader (read once, in its order)
Data = tuple[torch.Tensor, torch.Tensor] | Iterable


def tensors(data: Data) -> tuple[torch.Tensor, torch.Tensor]:
    """``data`` as one ``(x, y)`` pair of tensors."""
    if isinstance(data, tuple) and len(data) == 2 and all(isinstance(t, torch.Tensor) for t in data):
        return data
    xs, ys = zip(*((x, y) for x, y in data))
    return torch.cat(xs), torch.cat(ys)


def client_data(context: Context, train_data: Data, test_data: Data) -> ClientData:
    """Your training and test data as fedapp's clients hold a partition (features as given: no
    normalisation or augmentation of fedapp's)."""
    (train_x, train_y), (test_x, test_y) = tensors(train_data), tensors(test_data)
    num_classes = int(max(train_y.max(), test_y.max() if len(test_y) else 0)) + 1
    return ClientData(partition_id(context), train_x, train_y, test_x, test_y, num_classes, (), (), False)


def run_config(strategy: str, seed: int) -> RunConfig:
    """The client side's settings that no message carries: the strategy (it names the client and
    the state files) and the seed of the local batches."""
    return registry.parse_run_config({"strategy": strategy, "seed": seed}, side="client")


def query(strategy: str, msg: Message, context: Context, train_data: Data, test_data: Data,
          seed: int = 0) -> Message:
    """Your ``@app.query()``: fedapp's discovery answer (the partition id and its split sizes) and, at
    the end of the run, the removal of this client's state files. Without it a node counts as a
    plain Flower ClientApp, which only strategies whose clients train the model they receive take."""
    return answer_query(msg, context, run_config(strategy, seed), lambda: {
        "num-train": len(tensors(train_data)[1]), "num-test": len(tensors(test_data)[1])})


def train(strategy: str, msg: Message, context: Context, model: torch.nn.Module, train_data: Data, test_data: Data,
          seed: int = 0, device: str = "cpu") -> Message:
    """Your ``@app.train()``: ``strategy``'s client update (``registry.client(strategy)``) of
    ``model``, received from the message, on ``train_data``, from and to this client's state in
    ``context.state``. ``seed`` draws the local batches (the server's run-config seed gives fedapp's
    own clients' batches)."""
    cfg = run_config(strategy, seed)
    data = client_data(context, train_data, test_data)
    return answer_train(msg, context, cfg, lambda state: registry.client(strategy)(cfg, model, data, state, device))


def evaluate(strategy: str, msg: Message, context: Context, model: torch.nn.Module, train_data: Data, test_data: Data,
             seed: int = 0, device: str = "cpu") -> Message:
    """Your ``@app.evaluate()``: ``strategy``'s client evaluation of the received model on ``test_data``
    (the training split names the classes label masking keeps)."""
    cfg = run_config(strategy, seed)
    data = client_data(context, train_data, test_data)
    return answer_evaluate(msg, context, cfg,
                           lambda state: registry.client(strategy)(cfg, model, data, state, device))

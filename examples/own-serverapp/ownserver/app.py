"""Your ServerApp runs fedapp's FedSMOO on your model; your ClientApp runs FedSMOO's client update."""

import torch
from flwr.app import ArrayRecord, Context
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from torch import nn

from fedapp.runtime import library
from strategies import FedSMOO


def Net():
    return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 4))


def load_data(context: Context):
    """This node's own examples: 20 features, 4 classes by a shared rule; 160 to train, 40 to test."""
    x = torch.randn(200, 20, generator=torch.Generator().manual_seed(context.node_config["partition-id"]))
    y = (x[:, :4] + x[:, 4:8]).argmax(dim=1)
    return (x[:160], y[:160]), (x[160:], y[160:])


server = ServerApp()


@server.main()
def main(grid: Grid, context: Context) -> None:
    torch.manual_seed(0)
    strategy = FedSMOO(rho=0.05, beta=100.0, lr=0.1, local_steps=10, num_clients=2)
    result = strategy.start(grid, initial_arrays=ArrayRecord(Net().state_dict()),
                            num_rounds=context.run_config["num-server-rounds"])
    last = max(result.evaluate_metrics_clientapp)
    print(f"round {last}: federated accuracy {result.evaluate_metrics_clientapp[last]['accuracy']:.3f}")
    torch.save(result.arrays.to_torch_state_dict(), context.run_config["out"])


client = ClientApp()


@client.query()
def query(msg, context):
    return library.query("fedsmoo", msg, context, *load_data(context))


@client.train()
def train(msg, context):
    return library.train("fedsmoo", msg, context, Net(), *load_data(context))


@client.evaluate()
def evaluate(msg, context):
    return library.evaluate("fedsmoo", msg, context, Net(), *load_data(context))

"""Your ClientApp: your model and data, SCAFFOLD's client update (control variates in context.state)."""

import torch
from flwr.clientapp import ClientApp
from torch import nn

from fedapp.runtime import library


def Net(input_shape=(60,), num_classes=10):
    """fedapp's server builds it as Net(input_shape, num_classes) of its dataset (run config model)."""
    return nn.Linear(input_shape[0], num_classes)


def load_data(context):
    """This node's own examples: 60 features, 10 classes by a shared linear rule."""
    rule = torch.randn(60, 10, generator=torch.Generator().manual_seed(0))
    x = torch.randn(250, 60, generator=torch.Generator().manual_seed(100 + context.node_config["partition-id"]))
    y = (x @ rule).argmax(dim=1)
    return (x[:200], y[:200]), (x[200:], y[200:])


app = ClientApp()


@app.query()
def query(msg, context):
    return library.query(context.run_config["strategy"], msg, context, *load_data(context))


@app.train()
def train(msg, context):
    return library.train(context.run_config["strategy"], msg, context, Net(), *load_data(context))


@app.evaluate()
def evaluate(msg, context):
    return library.evaluate(context.run_config["strategy"], msg, context, Net(), *load_data(context))

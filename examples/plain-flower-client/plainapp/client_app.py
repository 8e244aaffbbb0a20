"""plainapp: a ClientApp as Flower's quickstart writes it; nothing in it knows fedapp."""

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from plainapp.task import Net, load_data
from plainapp.task import test as test_fn
from plainapp.task import train as train_fn

app = ClientApp()


@app.train()
def train(msg: Message, context: Context):
    """Train the model on local data."""
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    device = torch.device("cpu")
    trainloader, _ = load_data(context.node_config["partition-id"], context.node_config["num-partitions"])
    train_loss = train_fn(model, trainloader, context.run_config["local-epochs"], msg.content["config"]["lr"],
                          device)
    metrics = {"train_loss": train_loss, "num-examples": len(trainloader.dataset)}
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context):
    """Evaluate the model on local data."""
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    _, valloader = load_data(context.node_config["partition-id"], context.node_config["num-partitions"])
    eval_loss, eval_acc = test_fn(model, valloader, torch.device("cpu"))
    metrics = {"eval_loss": eval_loss, "eval_acc": eval_acc, "num-examples": len(valloader.dataset)}
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)

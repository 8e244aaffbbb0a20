"""FedFA client: reports the received model's training accuracy, then trains as FedAvg."""

from clients.base import FedClient
from fedapp.records import Payload
from fedapp.training import evaluate


class FedFAClient(FedClient):
    def fit(self, payload: Payload, config: dict):
        self.receive(payload, config)
        d = self.data
        acc = evaluate(self.model, d.train_x, d.train_y, mean=d.mean, std=d.std, device=self.device)["accuracy"]
        reply, metrics = super().fit(payload, config)
        metrics["train-accuracy"] = acc
        return reply, metrics

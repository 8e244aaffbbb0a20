"""FedFA client: reports the received model's training accuracy, then trains as FedAvg."""

from clients.base import FedClient
from clients.keys import Settings
from fedapp.core.records import Payload
from fedapp.core.training import evaluate


class FedFAClient(FedClient):
    def receive(self, payload: Payload, config: dict) -> None:
        super().receive(payload, config)
        d = self.data
        self.received_accuracy = evaluate(self.model, d.train_x, d.train_y, mean=d.mean, std=d.std,
                                          device=self.device)["accuracy"]

    def reply_metrics(self) -> dict[str, float]:
        return {"train-accuracy": self.received_accuracy}


#: fedfa's prefix: FedAvg's, as the base strategy's; its clients read no key of their own
FEDFA = Settings("fedavg")

ALGORITHMS = {"fedfa": (FEDFA, FedFAClient)}

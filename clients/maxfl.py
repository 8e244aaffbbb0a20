"""MaxFL client: trains the global model when it beats its own model by its threshold."""

from clients.base import FedClient
from clients.keys import Settings
from fedapp.core.config import Key
from fedapp.core.records import Payload
from fedapp.core.training import evaluate

SCORE_EXAMPLES = 1024  # a fixed slice of training data scores both models


class MaxFLClient(FedClient):
    """Keeps its own model in ``self.state["local"]``; ``joined`` says which one it trains."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.joined = True  #: whether the client trains the global model this round

    def train_loss(self) -> float:
        d = self.data
        return evaluate(self.model, d.train_x[:SCORE_EXAMPLES], d.train_y[:SCORE_EXAMPLES], mean=d.mean,
                        std=d.std, device=self.device)["loss"]

    def load_model(self, payload: Payload) -> None:
        """The global model when it serves this client at least as well as its own,
        F_i(w) <= F_i(v_i) + margin, else its own: for training and for evaluation alike."""
        self.load_tensors(payload["arrays"])
        self.joined = True
        if "local" in self.state:
            global_loss = self.train_loss()
            self.load_tensors(self.state["local"])
            if global_loss <= self.train_loss() + self.setting("margin"):
                self.load_tensors(payload["arrays"])
            else:
                self.joined = False

    def after_train(self, payload: Payload, config: dict) -> None:
        self.state["local"] = self.model_tensors()

    def reply_metrics(self) -> dict[str, float]:
        return {"joined": int(self.joined)}


#: the run-config keys maxfl's clients read (``maxfl.<key>``)
MAXFL = Settings(
    "maxfl", keys=(Key("margin", float, 0.0, "Loss margin added to the client's own-model loss threshold."),),
)

ALGORITHMS = {"maxfl": (MAXFL, MaxFLClient)}

"""FedALS: the head is averaged every round, the body only every alpha rounds; and FedALS + SCAFFOLD."""

from __future__ import annotations

from flwr.app import MessageType
from flwr.serverapp import Grid

from clients.fedals import BODY_LAYERS, FEDALS, FEDALS_SCAFFOLD, LAYER_GROUPS, NESTEROV, SCAFFOLD_VARIANT
from fedapp.core.config import ConfigError, Key
from fedapp.core.layer_split import split_model
from fedapp.core.records import Shared, Tensors
from fedapp.server.replies import spec_of
from strategies.base import FedStrategy
from strategies.scaffold import updated_control
from strategies.settings import declare


class FedALS(FedStrategy):
    """FedALS (Gholami and Seferoglu, "Differentiated Aggregation to Improve Generalization in
    Federated Learning", Algorithm 1).

    The model w = [phi, h] is split into a body phi (the first L layers, ``fedals.body-layers``)
    and a head h. Each client i runs SGD on its own w_i; one round is tau local steps
    (``local-steps``). With S_t the clients of round t:

        every round:             h_i <- sum_{j in S_t} n_j h_j / sum_{j in S_t} n_j
        if t mod alpha == 0:     phi_i <- sum_{j in S_t} n_j phi_j / sum_{j in S_t} n_j

    (two independent ``if`` blocks; alpha = 1 is FedAvg). Between body averages every client
    keeps training its own body, persisted with its SGD momentum; the server sends a body only
    when it holds an average newer than the client's, so round 1 synchronises the full model
    and a client is never reset to a stale body. Each way only the averaged parts travel.
    The evaluated model is the average of all clients' models, (mean phi_i, mean h_i).
    """

    config_prefix, config_keys, client_keys = declare(
        FEDALS, Key("alpha", int, 10, "Body averaging period in rounds (alpha = 1 is FedAvg).", low=1),
        BODY_LAYERS, LAYER_GROUPS, SCAFFOLD_VARIANT, NESTEROV)
    checkpoint_attrs = ("body_round", "body_pids", "client_body")
    global_model = False  # the clients keep their own bodies between body averages

    @classmethod
    def check_config(cls, cfg):
        if cfg.algo("nesterov") and cfg.momentum == 0.0:
            raise ConfigError("run config 'fedals.nesterov' = True is invalid with momentum = 0: allowed is False")

    @classmethod
    def check_model(cls, cfg, model):
        cls.body_head(cfg, model)

    @staticmethod
    def body_head(cfg, model) -> tuple[list[str], list[str]]:
        """(body, head) keys of ``model`` by ``fedals.body-layers`` or the model's declared head."""
        try:
            return split_model(model, cfg.algo("body-layers"), cfg.algo("layer-groups"))
        except ValueError as err:
            key = "head-modules" if "declare" in str(err) else "fedals.body-layers"
            raise ConfigError(f"run config '{key}' = {cfg[key]!r} is invalid for {cfg.strategy}: {err}") from None

    def __init__(self, cfg, model, dataset=None):
        super().__init__(cfg, model, dataset)
        self.body_keys, self.head_keys = self.body_head(cfg, model)
        self.alpha: int = cfg.algo("alpha")
        self.body_round = 0  # round of the last body average (0: the initial model)
        self.body_pids: set[int] = set()  # clients whose bodies that average holds
        self.client_body: dict[int, int] = {}  # pid -> body_round of the last body it received
        self.averaged: Tensors | None = None  # the evaluated model, set before evaluation (begin)
        self.eval_parts: dict[str, Tensors] = {}  # its body and head, as evaluation messages carry them
        self.split_views()

    def split_views(self) -> None:
        """Body and head of the global model as dicts shared by all messages of a round."""
        self.body = {k: self.global_state[k] for k in self.body_keys}
        self.head = {k: self.global_state[k] for k in self.head_keys}

    def is_body_round(self, server_round: int) -> bool:
        return server_round % self.alpha == 0

    def reference(self, pid, name):
        """A body not sent this round is measured against the global one (screen, clipping)."""
        ref = super().reference(pid, name)
        return self.body if ref is None and name == "body" else ref

    def sends_body(self, pid: int) -> bool:
        """Whether ``pid`` gets the global body: only when it is newer than the client's own."""
        return self.client_body.get(pid, -1) < self.body_round

    def broadcast_payload(self, phase, server_round):
        return {"head": self.head} if phase == "train" else self.eval_parts

    def shared_payloads(self, phase, server_round):
        return {"body": self.body} if phase == "train" else {}

    def client_payload(self, phase, pid, server_round):
        return {"body": Shared("body")} if phase == "train" and self.sends_body(pid) else {}

    def client_config(self, phase, pid, server_round):
        config = super().client_config(phase, pid, server_round)
        return {**config, "sync-body": self.is_body_round(server_round)} if phase == "train" else config

    def reply_spec(self, pid, server_round):
        return spec_of({"head": self.head, **({"body": self.body} if self.is_body_round(server_round) else {})})

    def aggregate(self, server_round, replies):
        for r in replies:  # a reply proves the client holds the body it was sent
            self.client_body[r.pid] = self.body_round
        weights = [r.num_examples if self.weighted else 1.0 for r in replies]
        self.global_state.update(self.combine([r.payload["head"] for r in replies], weights))
        if self.is_body_round(server_round):
            self.global_state.update(self.combine([r.payload["body"] for r in replies], weights))
            self.body_round, self.body_pids = server_round, {r.pid for r in replies}
        self.split_views()

    # ---- evaluation of the averaged model ----------------------------------------------
    def averaged_model(self, server_round: int, grid: Grid) -> Tensors:
        """(mean phi_i, mean h_i) over all training clients. Right after a body average of
        everyone that is the global model; otherwise the bodies are fetched (eval traffic)."""
        pool = self.driver.train_pool()
        if self.body_round == server_round and self.body_pids == set(pool):
            return self.global_state
        spec = spec_of({"body": self.body})
        valid = self.driver.round_trip(grid, server_round, dict.fromkeys(pool, {}),
                                lambda pid: {**self.client_config("evaluate", pid, server_round), "collect-body": True},
                                lambda pid: spec, MessageType.EVALUATE, "eval")
        if not valid:
            return self.global_state
        weights = [self.clients[r.pid].num_train if self.weighted else 1.0 for r in valid]
        return {**self.global_state, **self.combine([r.payload["body"] for r in valid], weights)}

    def begin(self, phase, server_round, grid):
        if phase != "evaluate":
            return
        evaluating = (self.cfg.central_eval and self.dataset is not None) or self.cfg.fraction_evaluate > 0
        self.averaged = self.averaged_model(server_round, grid) if evaluating else None
        if self.averaged is not None:
            self.eval_parts = {"body": {k: self.averaged[k] for k in self.body_keys},
                               "head": {k: self.averaged[k] for k in self.head_keys}}

    def central_state(self):
        return self.global_state if self.averaged is None else self.averaged


class FedALSScaffold(FedALS):
    """FedALS + SCAFFOLD (Gholami and Seferoglu, Appendix, Algorithm 4).

    The control variates split like the model, c = [c_phi, c_h], and each part is refreshed
    when its part of the model is averaged (SCAFFOLD option II over the steps since that part
    was last synchronised):

        every round:           c_{h,i} <- c_{h,i} - c_h + (h - h_i) / (eta tau)
        if t mod alpha == 0:   c_{phi,i} <- c_{phi,i} - c_phi + (phi - phi_i) / (eta alpha tau)

    where h and phi are the parts received at their last synchronisation, and the server sets
    c_part <- c_part + (1/N) sum_{i in S_t} Delta c_{part,i} alongside the model average. Under
    SGD momentum beta, eta there is the effective step eta / (1 - beta) (``control_lr``). Local
    steps use g - c_i + c. A control part travels with its model part: "control" carries c_h
    every round and c_phi with the body; "control-delta" carries the Delta c of the parts averaged.
    """

    config_prefix, config_keys, client_keys = declare(FEDALS_SCAFFOLD, *FedALS.config_keys)
    checkpoint_attrs = ("control",)

    @classmethod
    def check_config(cls, cfg):
        super().check_config(cfg)
        if cfg.momentum >= 1.0:  # the effective step eta / (1 - beta) of option II
            raise ConfigError(f"run config 'momentum' = {cfg.momentum} is invalid for fedals-scaffold: allowed is < 1")

    def __init__(self, cfg, model, dataset=None):
        super().__init__(cfg, model, dataset)
        self.control: Tensors = self.zeros_like_params()  #: c = [c_phi, c_h]
        self.split_control()

    def split_control(self) -> None:
        """c_h and [c_phi, c_h] as dicts shared by all messages of a round."""
        params = set(self.param_keys)
        self.body_params = [k for k in self.body_keys if k in params]
        self.head_params = [k for k in self.head_keys if k in params]
        self.head_control = {k: self.control[k] for k in self.head_params}
        self.full_control = {k: self.control[k] for k in self.body_params + self.head_params}

    def shared_payloads(self, phase, server_round):
        shared = super().shared_payloads(phase, server_round)
        return {**shared, "control": self.full_control, "head-control": self.head_control} if phase == "train" else shared

    def client_payload(self, phase, pid, server_round):
        payload = super().client_payload(phase, pid, server_round)
        if phase == "train":
            payload["control"] = Shared("control" if "body" in payload else "head-control")
        return payload

    def reply_spec(self, pid, server_round):
        spec = super().reply_spec(pid, server_round)
        spec["control-delta"] = spec_of({"c": self.full_control if "body" in spec else self.head_control})["c"]
        return spec

    def aggregate(self, server_round, replies):
        # a part not averaged this round has Delta c = 0: pad to the full c for SCAFFOLD's update
        zeros = {k: 0.0 * self.control[k] for k in self.body_params}
        self.control = updated_control(self.control, [{**zeros, **r.payload["control-delta"]} for r in replies],
                                       len(self.driver.train_pool()), None if self.cfg.aggregation == "mean" else self.combine)
        super().aggregate(server_round, replies)
        self.split_control()


ALGORITHMS = {"fedals": FedALS, "fedals-scaffold": FedALSScaffold}

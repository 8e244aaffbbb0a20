"""Label masking at evaluation (``eval-label-mask``; PeFLL, Table 6): a client's
federated evaluation restricts predictions to the classes of its training split."""

import math

import pytest
import torch

from clients.fedavg import FedAvgClient
from fedapp.core.config import ConfigError
from fedapp.runtime.registry import parse_run_config
from fedapp.core.experiment import ClientData, client_data
from fedapp.runtime.inprocess import run_local
from fedapp.core.training import evaluate
from tests.test_pefll import image_config  # noqa: F401  (fixture)

# One row of logits per test example; the model below returns row i for input e_i.
# Present classes {0, 1}; the largest logit is always an absent class (2 or 3).
LOGITS = torch.tensor([
    [2.0, 1.0, 5.0, 0.0],  # label 0: masked -> 0, right
    [3.0, 1.0, 4.0, 0.0],  # label 1: masked -> 0, wrong
    [0.0, 2.0, 1.0, 6.0],  # label 1: masked -> 1, right
    [1.0, 0.0, 0.0, 3.0],  # label 2, absent from training: wrong either way, unmasked loss
])
TEST_Y = torch.tensor([0, 1, 1, 2])
PRESENT = torch.tensor([0, 1])


def table_model() -> torch.nn.Module:
    model = torch.nn.Linear(4, 4, bias=False)
    with torch.no_grad():
        model.weight.copy_(LOGITS.T)  # e_i @ W^T = LOGITS[i]
    return model


def test_table_model_favours_absent_classes_without_mask():
    x = torch.eye(4)
    assert torch.equal(table_model()(x), LOGITS)
    m = evaluate(table_model(), x, TEST_Y)
    assert m["accuracy"] == 0.0
    ce = [math.log(sum(math.exp(v) for v in row)) - row[y] for row, y in zip(LOGITS.tolist(), TEST_Y.tolist())]
    assert m["loss"] == pytest.approx(sum(ce) / 4)
    # None and an empty class set both mean: no masking
    assert evaluate(table_model(), x, TEST_Y, classes=torch.tensor([], dtype=torch.long)) == m


@pytest.mark.parametrize("batch_size", [1024, 1, 3])
def test_masked_accuracy_and_loss_by_hand(batch_size):
    m = evaluate(table_model(), torch.eye(4), TEST_Y, classes=PRESENT, batch_size=batch_size)
    assert m["accuracy"] == 0.5 and m["num-examples"] == 4
    # cross-entropy over the present classes {0, 1} only; the absent label 2 over all four
    by_hand = [
        -math.log(math.exp(2) / (math.exp(2) + math.exp(1))),
        -math.log(math.exp(1) / (math.exp(3) + math.exp(1))),
        -math.log(math.exp(2) / (math.exp(0) + math.exp(2))),
        -math.log(math.exp(0) / (math.exp(1) + math.exp(0) + math.exp(0) + math.exp(3))),
    ]
    assert m["loss"] == pytest.approx(sum(by_hand) / 4)


def test_client_masks_with_its_training_classes():
    """The client's present classes are its training labels ({0, 1} here, not the test's 2)."""
    data = ClientData(0, torch.eye(4)[[0, 1, 0]], torch.tensor([1, 0, 1]), torch.eye(4), TEST_Y,
                      num_classes=4, mean=(), std=(), augment=False)
    payload = {"arrays": table_model().state_dict()}
    on, off = (FedAvgClient(parse_run_config({}), table_model(), data) for _ in range(2))
    on.config, off.config = {"eval-label-mask": "exclude"}, {"eval-label-mask": "off"}  # as the server sends it
    assert torch.equal(on.eval_classes(), PRESENT) and off.eval_classes() is None
    unmasked = evaluate(table_model(), torch.eye(4), TEST_Y)
    assert on.evaluate(payload, on.config)[1] == {**evaluate(table_model(), torch.eye(4), TEST_Y, classes=PRESENT),
                                                  **{f"unmasked-{k}": v for k, v in unmasked.items()}}
    assert off.evaluate(payload, off.config) == ({}, unmasked)
    # a validation split is evaluated the same way, as val-*
    data.val_x, data.val_y = torch.eye(4)[[1, 3]], torch.tensor([1, 3])
    val = evaluate(table_model(), data.val_x, data.val_y, classes=PRESENT)
    assert {k[4:]: v for k, v in on.evaluate(payload, on.config)[1].items() if k.startswith("val-")} == val


def test_zero_mask_multiplies_logits_by_presence_as_the_authors_code():
    """'zero': logits times the 0/1 presence vector; an absent class keeps logit 0 and wins
    wherever every present logit is negative (row 1 here)."""
    logits = torch.tensor([[2.0, 1.0, 5.0, 0.0], [-1.0, -2.0, 4.0, 0.0], [0.0, 2.0, 1.0, 6.0]])
    model = torch.nn.Linear(3, 4, bias=False)
    with torch.no_grad():
        model.weight.copy_(logits.T)
    y = torch.tensor([0, 0, 1])
    m = evaluate(model, torch.eye(3), y, classes=PRESENT, mask="zero")
    zeroed = [[2.0, 1.0, 0.0, 0.0], [-1.0, -2.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0]]
    assert m["accuracy"] == pytest.approx(2 / 3)  # row 1 predicts class 2 (logit 0 > -1)
    ce = [math.log(sum(math.exp(v) for v in row)) - row[t] for row, t in zip(zeroed, y.tolist())]
    assert m["loss"] == pytest.approx(sum(ce) / 3)
    assert evaluate(model, torch.eye(3), y, classes=PRESENT)["accuracy"] == 1.0  # 'exclude' cannot pick 2


def test_key_is_validated_and_off_by_default():
    assert parse_run_config({}).eval_label_mask == "off"
    assert parse_run_config({"eval-label-mask": "zero"}).eval_label_mask == "zero"
    with pytest.raises(ConfigError, match="'eval-label-mask'"):
        parse_run_config({"eval-label-mask": "yes"})


@pytest.mark.parametrize("strategy,extra", [
    ("fedavg", {"central-eval": True}),  # FedClient.evaluate, and the server's central evaluation
    ("local", {}),  # FedClient.evaluate on the client's own model
    ("hcct", {}),  # FedClient.evaluate on the group's model
    ("fedrep", {"fedrep.head-steps": 2}),  # FedRepClient.evaluate (new clients fit a head first)
    ("pefll", {}),  # PeFLLClient.evaluate
    ("pfedhn", {"pfedhn.k": 3, "pfedhn.new-client-rounds": 2}),  # the same client, pFedHN's server
])
def test_masking_end_to_end_on_pathological_partition(image_config, strategy, extra):
    """Same seed and model: masking changes only the clients' evaluation. Every client's test
    labels are among its training labels, so a right unmasked prediction stays right (accuracy
    can only rise) and the softmax over a subset holding the label gives a smaller loss."""
    run_config = {**image_config, "strategy": strategy, "num-server-rounds": 2, "local-steps": 2,
                  "fraction-train": 1.0, "fraction-evaluate": 1.0, "unseen-fraction": 0.34, **extra}
    cfg = parse_run_config(run_config)
    assert cfg.partition == "pathological" and cfg.partition_classes == 2
    for pid in range(cfg.num_clients):
        d = client_data(cfg, pid)
        train, test = set(d.train_y.tolist()), set(d.test_y.tolist())
        assert len(train) == 2 and test <= train
    plain = run_local(run_config).history[-1]
    masked = run_local({**run_config, "eval-label-mask": "exclude"}).history[-1]
    for prefix in ("fed", "fed-seen", "fed-unseen"):
        assert masked[f"{prefix}-accuracy"] >= plain[f"{prefix}-accuracy"], prefix
        assert masked[f"{prefix}-loss"] < plain[f"{prefix}-loss"], prefix
    central = [k for k in plain if k.startswith("central-")]
    assert central or strategy != "fedavg"
    for k in central:
        assert masked[k] == plain[k], k
    assert masked.get("train-loss") == plain.get("train-loss")

"""Tests for fedapp.core.models: shapes, exact ResNet-20 size, and the layer-group contract strategies rely on."""
import pytest
import torch
from torch import nn

from fedapp.core.models import MODELS, TEXT_MODELS, body_head_keys, build_model, layer_groups, param_count

IMAGE_SHAPES = [(3, 32, 32), (1, 28, 28)]
VOCAB = 30
CASES = ([(name, shape) for name in MODELS if name not in TEXT_MODELS for shape in IMAGE_SHAPES]
         + [("mlp", (60,)), ("logreg", (60,)), ("lstm", (80,))])


def example(case, n=2):
    """n inputs for the case's model: token ids for a text model, else random floats."""
    name, shape = case
    return torch.randint(1, VOCAB, (n, *shape)) if name in TEXT_MODELS else torch.randn(n, *shape)


@pytest.fixture(scope="module")
def models():
    """Build each (name, shape) model once; resnet18gn is the slow one."""
    torch.manual_seed(0)
    return {case: build_model(*case, num_classes=7, vocab_size=VOCAB if case[0] in TEXT_MODELS else None)
            for case in CASES}


def forward_layer_order(model, case):
    """Names of the modules owning parameters of their own (norms aside) in the order forward() calls them."""
    order = []
    hooks = [m.register_forward_hook(lambda m, i, o, n=n: order.append(n))
             for n, m in model.named_modules()
             if any(True for _ in m.parameters(recurse=False)) and not isinstance(m, (nn.BatchNorm2d, nn.GroupNorm))]
    model.eval()
    with torch.no_grad():
        model(example(case, 1))
    for h in hooks:
        h.remove()
    return order


@pytest.mark.parametrize("case", CASES)
def test_output_shape(models, case):
    out = models[case](example(case))
    assert out.shape == (2, 7)


@pytest.mark.parametrize("case", CASES)
def test_layer_groups_cover_keys_once_in_forward_order(models, case):
    model = models[case]
    groups = layer_groups(model)
    flat = [k for g in groups for k in g]
    assert flat == list(model.state_dict())  # every key exactly once, in canonical order
    assert [g[0].rpartition(".")[0] for g in groups] == forward_layer_order(model, case)
    assert all(".weight" in g[0] for g in groups)


@pytest.mark.parametrize("case", CASES)
def test_default_head_is_fc(models, case):
    body, head = body_head_keys(models[case])
    assert head == ["fc.weight", "fc.bias"]
    assert body + head == list(models[case].state_dict())


def test_resnet20_exact_size_and_groups():
    model = build_model("resnet20", (3, 32, 32), 10)
    assert param_count(model) == 292_954
    body, head = body_head_keys(model)
    assert param_count(model, head) == 64 * 10 + 10 == 650
    assert param_count(model, body) == 292_954 - 650
    groups = layer_groups(model)
    assert len(groups) == 22  # stem + 9 blocks x 2 convs + 2 shortcut convs + fc
    assert groups[0] == ["conv1.weight", "bn1.weight", "bn1.bias",
                         "bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked"]
    shortcut = [g for g in groups if "shortcut" in g[0]]
    assert [g[0] for g in shortcut] == ["layers.1.0.shortcut.0.weight", "layers.2.0.shortcut.0.weight"]
    assert all(len(g) == 6 for g in groups[:-1])  # every conv carries its BN params + 3 buffers
    conv = model.layers[1][0].shortcut[0]
    assert conv.kernel_size == (3, 3) and conv.stride == (2, 2) and conv.bias is None


def test_resnet18gn_uses_groupnorm_with_two_groups(models):
    model = models[("resnet18gn", (3, 32, 32))]
    norms = [m for m in model.modules() if isinstance(m, (nn.GroupNorm, nn.BatchNorm2d))]
    assert norms and all(isinstance(m, nn.GroupNorm) and m.num_groups == 2 for m in norms)
    assert len(layer_groups(model)) == 1 + 16 + 3 + 1  # stem + 8 blocks x 2 + 3 shortcuts + fc


def test_lenet_flatten_follows_input(models):
    assert models[("lenet", (3, 32, 32))].fc1.in_features == 32 * 5 * 5
    assert models[("lenet", (1, 28, 28))].fc1.in_features == 32 * 4 * 4


def test_num_body_layers_split(models):
    model = models[("resnet20", (3, 32, 32))]
    groups = layer_groups(model)
    body, head = body_head_keys(model, num_body_layers=5)
    assert body == [k for g in groups[:5] for k in g]
    assert head == [k for g in groups[5:] for k in g]
    assert param_count(model, body) + param_count(model, head) == param_count(model)


@pytest.mark.parametrize("bad", [0, 22, -1, 2.5, True])
def test_invalid_num_body_layers(models, bad):
    with pytest.raises(ValueError, match="num_body_layers < 22"):
        body_head_keys(models[("resnet20", (3, 32, 32))], num_body_layers=bad)


def test_logreg_default_body_is_empty_and_cannot_be_split():
    model = build_model("logreg", (60,), 10)
    assert body_head_keys(model) == ([], ["fc.weight", "fc.bias"])
    with pytest.raises(ValueError, match="num_body_layers < 1"):
        body_head_keys(model, num_body_layers=1)


def test_unknown_model_lists_allowed_names():
    with pytest.raises(ValueError, match="allowed") as err:
        build_model("vgg", (3, 32, 32), 10)
    assert all(name in str(err.value) for name in MODELS)


def test_param_count_excludes_frozen_and_buffers():
    model = build_model("resnet20", (3, 32, 32), 10)
    model.fc.weight.requires_grad_(False)
    assert param_count(model) == 292_954 - 640
    assert param_count(model, ["bn1.running_mean", "bn1.weight"]) == 16

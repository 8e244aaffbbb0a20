"""Model zoo for the fedapp experiments plus helpers that expose each model's *layer structure*.

Personalised-FL strategies (FedALS, PeFLL, FedRep-style body/head splits) need to talk about
"layers" rather than raw tensors: a layer is a Conv/Linear weight together with its bias and
the normalisation module that follows it.  Every model here registers its submodules in the
same order its ``forward`` uses them, so ``model.state_dict()`` key order *is* forward order
and ``layer_groups`` can derive layers by walking ``named_modules()`` without tracing.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn
import torch.nn.functional as F

_LAYER_TYPES = (nn.Conv2d, nn.Linear)
_NORM_TYPES = (nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm)


def _flat_dim(features: nn.Module, input_shape: tuple[int, ...]) -> int:
    """Size of ``features`` output per sample, found with a dummy pass so any input size works."""
    with torch.no_grad():
        return features(torch.zeros(1, *input_shape)).numel()


class LeNet(nn.Module):
    """LeNet-5 style CNN of PeFLL (Table 3): conv5x5(16)-pool-ReLU, conv5x5(32)-pool-ReLU, FC 120-84-C."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(input_shape[0], 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc1 = nn.Linear(_flat_dim(self._features, input_shape), 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc = nn.Linear(84, num_classes)

    def _features(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        return F.relu(F.max_pool2d(self.conv2(x), 2))

    def forward(self, x):
        x = self._features(x).flatten(1)
        return self.fc(F.relu(self.fc2(F.relu(self.fc1(x)))))


class CNN4(nn.Module):
    """HCCT's 4-layer CIFAR CNN: two conv5x5 (32, 64) each with ReLU + 2x2 maxpool, then FC 512 and FC C."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(input_shape[0], 32, 5)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.fc1 = nn.Linear(_flat_dim(self._features, input_shape), 512)
        self.fc = nn.Linear(512, num_classes)

    def _features(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        return F.max_pool2d(F.relu(self.conv2(x)), 2)

    def forward(self, x):
        return self.fc(F.relu(self.fc1(self._features(x).flatten(1))))


class MLP(nn.Module):
    """HCCT's Fashion-MNIST MLP (FC 200-200-C); flattens, so it also serves flat (D,) inputs."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__()
        self.fc1 = nn.Linear(math.prod(input_shape), 200)
        self.fc2 = nn.Linear(200, 200)
        self.fc = nn.Linear(200, num_classes)

    def forward(self, x):
        return self.fc(F.relu(self.fc2(F.relu(self.fc1(x.flatten(1))))))


class LogReg(nn.Module):
    """FedProx's multinomial logistic regression: one Linear(D, C); softmax lives in the loss."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__()
        self.fc = nn.Linear(math.prod(input_shape), num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1))


class HCCTCNN(nn.Module):
    """The HCCT authors' CIFAR-10 CNN (their ``CNN_4``): conv3x3 16 (ReLU), then conv3x3 32/64/128
    each with ReLU + 2x2 maxpool, FC 2048-500 (ReLU, dropout 0.25), FC 500-C; 1,126,950 params on
    CIFAR-10. The authors' module names, except that the head is ``fc`` (their ``fc2``)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(input_shape[0], 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.conv3 = nn.Conv2d(32, 64, 3, padding=1)
        self.conv4 = nn.Conv2d(64, 128, 3, padding=1)
        self.fc1 = nn.Linear(_flat_dim(self._features, input_shape), 500)
        self.fc = nn.Linear(500, num_classes)
        self.dropout = nn.Dropout(0.25)

    def _features(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.max_pool2d(F.relu(self.conv3(x)), 2)
        return F.max_pool2d(F.relu(self.conv4(x)), 2)

    def forward(self, x):
        return self.fc(self.dropout(F.relu(self.fc1(self._features(x).flatten(1)))))


class HCCTMLP(nn.Module):
    """The HCCT authors' Fashion-MNIST MLP: FC D-64, dropout 0.5 then ReLU, FC 64-C (50,890 params on
    28x28; their ``layer_input`` / ``layer_hidden`` are ``fc1`` / ``fc``). ``softmax_output``: their
    forward ends in a softmax that their cross-entropy loss then treats as logits
    (``hcct-mlp-softmax``); plain logits by default."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, softmax_output: bool = False):
        super().__init__()
        self.fc1 = nn.Linear(math.prod(input_shape), 64)
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(64, num_classes)
        self.softmax_output = softmax_output

    def forward(self, x):
        out = self.fc(F.relu(self.dropout(self.fc1(x.flatten(1)))))
        return out.softmax(1) if self.softmax_output else out


def hcct_mlp_softmax(input_shape, num_classes):
    return HCCTMLP(input_shape, num_classes, softmax_output=True)


class BasicBlock(nn.Module):
    """ResNet basic block; the shortcut is registered last so state_dict order is conv1, conv2, shortcut."""

    def __init__(self, cin: int, cout: int, stride: int, norm: Callable[[int], nn.Module], shortcut_kernel: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = norm(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = norm(cout)
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, shortcut_kernel, stride, shortcut_kernel // 2, bias=False), norm(cout)
            )

    def forward(self, x):
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """ResNet: stem, stages of BasicBlocks, global average pool, ``fc`` head. The CIFAR stem is a
    3x3 stride-1 conv without max-pool; ``imagenet_stem`` is torchvision's 7x7 stride-2 conv and
    3x3 stride-2 max-pool."""

    def __init__(self, input_shape, num_classes, widths, depths, norm, shortcut_kernel, imagenet_stem=False):
        super().__init__()
        kernel, stride = (7, 2) if imagenet_stem else (3, 1)
        self.conv1 = nn.Conv2d(input_shape[0], widths[0], kernel, stride, kernel // 2, bias=False)
        self.bn1 = norm(widths[0])
        self.pool = nn.MaxPool2d(3, 2, 1) if imagenet_stem else nn.Identity()
        cin, stages = widths[0], []
        for i, (width, depth) in enumerate(zip(widths, depths)):
            blocks = []
            for j in range(depth):
                stride = 2 if i > 0 and j == 0 else 1
                blocks.append(BasicBlock(cin, width, stride, norm, shortcut_kernel))
                cin = width
            stages.append(nn.Sequential(*blocks))
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.layers(self.pool(F.relu(self.bn1(self.conv1(x)))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def resnet20(input_shape, num_classes):
    """ResNet-20 as in FedALS: BatchNorm, 3x3 stride-2 conv + BN shortcuts (292,954 params on CIFAR-10)."""
    return ResNet(input_shape, num_classes, (16, 32, 64), (3, 3, 3), nn.BatchNorm2d, shortcut_kernel=3)


def resnet18gn(input_shape, num_classes):
    """FedSMOO's model (Section 5; the authors' simulator, ``--model ResNet18``): torchvision's
    ImageNet-style ResNet-18 (7x7 stride-2 stem, max-pool) with every BatchNorm replaced by
    GroupNorm(2, C), as Hsieh et al. (2020) suggest for non-IID FL. 11,181,642 parameters at 10
    classes, in torchvision's parameter order, initialised as torchvision does (convolutions
    Kaiming-normal, fan-out)."""
    model = ResNet(input_shape, num_classes, (64, 128, 256, 512), (2, 2, 2, 2),
                   lambda c: nn.GroupNorm(2, c), shortcut_kernel=1, imagenet_stem=True)
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return model


def resnet18gn_cifar(input_shape, num_classes):
    """ResNet-18 with GroupNorm(2, C) and the CIFAR stem (3x3 stride-1 conv, no max-pool): 11,173,962
    parameters at 10 classes. Not the FedSMOO authors' model (that is ``resnet18gn``); keeps 32x32
    resolution through the first stage, so it costs about 16x the stem compute."""
    return ResNet(input_shape, num_classes, (64, 128, 256, 512), (2, 2, 2, 2),
                  lambda c: nn.GroupNorm(2, c), shortcut_kernel=1)


MODELS: dict[str, Callable[[tuple[int, ...], int], nn.Module]] = {
    "lenet": LeNet,
    "resnet20": resnet20,
    "resnet18gn": resnet18gn,
    "resnet18gn-cifar": resnet18gn_cifar,
    "cnn4": CNN4,
    "mlp": MLP,
    "logreg": LogReg,
    "hcct-cnn": HCCTCNN,
    "hcct-mlp": HCCTMLP,
    "hcct-mlp-softmax": hcct_mlp_softmax,
}


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Instantiate ``name`` sized for the dataset (input channels/size and class count)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; allowed: {sorted(MODELS)}")
    return MODELS[name](tuple(input_shape), num_classes)


def layer_groups(model: nn.Module) -> list[list[str]]:
    """Group state_dict keys into forward-ordered layers.

    Each Conv/Linear opens a group holding its own keys; state owned by any other module (the
    norm layer after it: affine parameters and running-stat buffers) joins the open group.
    Relies on the models registering submodules in forward order (true for every model here).
    """
    owned: dict[str, list[str]] = {}
    for key in model.state_dict():
        owned.setdefault(key.rpartition(".")[0], []).append(key)
    groups: list[list[str]] = []
    for name, module in model.named_modules():
        keys = owned.get(name, [])
        if isinstance(module, _LAYER_TYPES):
            groups.append(list(keys))
        elif keys:
            if not groups:
                raise ValueError(f"module {name!r} holds state before any Conv/Linear layer")
            groups[-1].extend(keys)
    return groups


def body_head_keys(model: nn.Module, num_body_layers: int | None = None) -> tuple[list[str], list[str]]:
    """Split state_dict keys into (body, head).

    By default the head is the final layer group (the classifier) and the body everything else,
    which is empty for the one-layer ``logreg``. With ``num_body_layers=L`` the body is the first
    L groups and the head the rest (FedALS Table 3); both sides must then be non-empty.
    """
    groups = layer_groups(model)
    n = len(groups)
    if num_body_layers is None:
        num_body_layers = n - 1
    else:
        is_int = isinstance(num_body_layers, int) and not isinstance(num_body_layers, bool)
        if not (is_int and 1 <= num_body_layers < n):
            raise ValueError(f"num_body_layers must be an int with 1 <= num_body_layers < {n} "
                             f"(this model has {n} layer groups), got {num_body_layers!r}")
    body = [k for g in groups[:num_body_layers] for k in g]
    head = [k for g in groups[num_body_layers:] for k in g]
    return body, head


def param_count(model: nn.Module, keys=None) -> int:
    """Number of trainable parameters, optionally only those whose names are in ``keys`` (buffers never count)."""
    wanted = None if keys is None else set(keys)
    return sum(p.numel() for n, p in model.named_parameters()
               if p.requires_grad and (wanted is None or n in wanted))

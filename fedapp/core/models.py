"""Model zoo for the fedapp experiments plus helpers that expose each model's *layer structure*.

Personalised-FL strategies (FedALS, PeFLL, FedRep-style body/head splits) need to talk about
"layers" rather than raw tensors: a layer is a Conv/Linear weight together with its bias and
the normalisation module that follows it.  Every model here registers its submodules in the
same order its ``forward`` uses them, so ``model.state_dict()`` key order *is* forward order
and ``layer_groups`` can derive layers by walking ``named_modules()`` without tracing.
"""
from __future__ import annotations

import importlib
import inspect
import math
from typing import Callable

import torch
from torch import nn
import torch.nn.functional as F

_NORM_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm)
#: the most parameters a hypernetwork generates (PeFLL, pFedHN): its output layer alone has
#: ``hyper-hidden`` (100) times as many, 4 bytes each, and the server's Adam keeps two more copies
MAX_GENERATED_PARAMS = 1_000_000


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


class LSTM(nn.Module):
    """LEAF's Shakespeare model (Caldas et al. 2018; PeFLL's next-character task): an 8-dim character
    embedding, two LSTM layers of 256, a linear head over the vocabulary, read at the last position.
    Padded batches (sequence classification; id 0 is padding) are read at each example's last real
    token, so the padding never reaches the head."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, vocab_size: int | None = None,
                 seq_len: int | None = None, embed_dim: int = 8, hidden: int = 256):
        super().__init__()
        if vocab_size is None:
            raise ValueError("lstm needs a text dataset (token ids and a vocabulary)")
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.lstm = nn.LSTM(embed_dim, hidden, num_layers=2, batch_first=True)
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x):
        out, _ = self.lstm(self.embed(x))
        last = (x != 0).sum(1).clamp(min=1) - 1  # the last real token of each (right-padded) row
        return self.fc(out[torch.arange(len(x), device=x.device), last])


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
    "lstm": LSTM,
}
#: the built-in models that read token ids (they take ``vocab_size`` and ``seq_len``)
TEXT_MODELS = ("lstm",)


def is_own(name: str) -> bool:
    """``model = "<module>:<callable>"``: the user's own model factory, not a built-in name."""
    return ":" in name


def factory(name: str) -> Callable[..., nn.Module]:
    """The callable ``name`` stands for: a built-in model, or ``<module>:<callable>`` imported from the
    user's package (installed or on ``PYTHONPATH``); ``<callable>`` may be dotted (``Net.build``)."""
    if not is_own(name):
        if name not in MODELS:
            raise ValueError(f"unknown model {name!r}; allowed: {sorted(MODELS)} or '<module>:<callable>'")
        return MODELS[name]
    module, _, attr = name.partition(":")
    try:
        obj = importlib.import_module(module)
    except ImportError as err:
        raise ValueError(f"cannot import module {module!r} ({type(err).__name__}: {err}); install the package "
                         "or put its folder on PYTHONPATH") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{name!r} is not callable")
    return obj


def takes_shapes(build: Callable[..., nn.Module]) -> bool:
    """Whether a model factory is called with ``(input_shape, num_classes)``: one with a required
    parameter is; one whose parameters all have defaults (a quickstart's ``Net()``) is called with
    none and sizes the model by its own code."""
    try:
        inspect.signature(build).bind()
    except TypeError:
        return True
    except ValueError:  # no signature to read (a builtin): the shapes, as to a built-in model
        return True
    return False


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, *, vocab_size: int | None = None,
                seq_len: int | None = None, head_modules: str = "") -> nn.Module:
    """Instantiate ``name`` sized for the dataset: ``factory(name)(input_shape, num_classes)``, plus
    ``vocab_size=`` and ``seq_len=`` for text data (token ids); a factory that needs no argument
    (``takes_shapes``) is called with none. ``head_modules`` (run config
    ``head-modules``, comma-separated module names) declares the model's head, overriding its own."""
    build = factory(name)
    text = {"vocab_size": vocab_size, "seq_len": seq_len} if vocab_size is not None else {}
    if not is_own(name) and name not in TEXT_MODELS:
        text = {}  # the image and feature models take neither
    model = build(tuple(input_shape), num_classes, **text) if takes_shapes(build) else build()
    if not isinstance(model, nn.Module):
        raise ValueError(f"{name!r} returned a {type(model).__name__}, not a torch.nn.Module")
    return declare_head(model, head_modules)


def declare_head(model: nn.Module, head_modules: str) -> nn.Module:
    """``model`` with its head declared as run config ``head-modules`` names it (comma-separated
    module names; '' leaves the model's own declaration)."""
    if head_modules:
        model.head_modules = tuple(m.strip() for m in head_modules.split(",") if m.strip())
    return model


def declared_head(model: nn.Module) -> list[str] | None:
    """The names of the model's head modules, as declared: ``head_modules`` (set from run config
    ``head-modules``), else a ``head`` attribute naming them (a string or a sequence of strings), else a
    submodule called ``head``; None when the model declares none. Each must be a submodule with state."""
    names = getattr(model, "head_modules", None)
    if names is None:
        head = getattr(model, "head", None)
        names = ["head"] if isinstance(head, nn.Module) else head
    if names is None:
        return None
    names = [names] if isinstance(names, str) else list(names)
    modules = dict(model.named_modules())
    for n in names:
        if n not in modules or not any(True for _ in modules[n].state_dict()):
            raise ValueError(f"declared head module {n!r} is not a submodule with parameters of "
                             f"{type(model).__name__} (its modules: {', '.join(k for k in modules if k)})")
    return names


def split_declared(model: nn.Module, head: list[str]) -> tuple[list[str], list[str]]:
    """(body, head) state_dict keys, the head the keys under the modules ``head``; both non-empty."""
    keys = list(model.state_dict())
    heads = [k for k in keys if any(k.startswith(f"{m}.") for m in head)]
    if len(heads) == len(keys):
        raise ValueError(f"the declared head {head} holds the whole model: no body is left")
    return [k for k in keys if k not in heads], heads


def layer_groups(model: nn.Module) -> list[list[str]]:
    """Group state_dict keys into forward-ordered layers.

    Each module owning state of its own opens a group holding its keys (a Conv, Linear, Embedding,
    LSTM, or a custom layer), except a norm layer: its affine parameters and running-stat buffers
    join the open group of the layer before it. Relies on the model registering submodules in
    forward order (true for every model here; a user's model's layers are counted in its order).
    """
    owned: dict[str, list[str]] = {}
    for key in model.state_dict():
        owned.setdefault(key.rpartition(".")[0], []).append(key)
    groups: list[list[str]] = []
    for name, module in model.named_modules():
        keys = owned.get(name, [])
        if keys and isinstance(module, _NORM_TYPES) and groups:
            groups[-1].extend(keys)
        elif keys:
            groups.append(list(keys))
    return groups


#: state_dict entries of torch's norm layers that are buffers (running statistics), not parameters
_NORM_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


def module_of(state: dict[str, torch.Tensor], head_modules: str = "") -> nn.Module:
    """A module whose state_dict is ``state``, under the same dotted names, its head declared by
    ``head_modules``: the structure a strategy built without a model reads from Flower's
    ``initial_arrays``. Every floating-point entry is taken as a parameter but norm layers' running
    statistics; the rest are buffers. It has no forward: a module whose parameters are otherwise, or
    whose kinds of layers matter, is passed as ``model=``."""
    root = nn.Module()
    for key, value in state.items():
        *path, name = key.split(".")
        module = root
        for part in path:
            if not hasattr(module, part):
                module.add_module(part, nn.Module())
            module = getattr(module, part)
        if value.is_floating_point() and name not in _NORM_BUFFERS:
            module.register_parameter(name, nn.Parameter(value.detach().clone(), requires_grad=False))
        else:
            module.register_buffer(name, value.detach().clone())
    return declare_head(root, head_modules)


def is_builtin(model: nn.Module) -> bool:
    return type(model).__module__ == __name__


def body_head_keys(model: nn.Module, num_body_layers: int | None = None) -> tuple[list[str], list[str]]:
    """Split state_dict keys into (body, head).

    By default the head is what the model declares (``declared_head``), else, for the models here,
    the final layer group (the classifier) and the body everything else, which is empty for the
    one-layer ``logreg``; a user's model that declares no head is refused (run config
    ``head-modules``). With ``num_body_layers=L`` the body is the first L groups and the head the rest
    (FedALS Table 3); both sides must then be non-empty.
    """
    groups = layer_groups(model)
    n = len(groups)
    if num_body_layers is None:
        head = declared_head(model)
        if head is not None:
            return split_declared(model, head)
        if not is_builtin(model):
            raise ValueError(f"{type(model).__name__} declares no head: set run config 'head-modules' to its head "
                             "modules' names (e.g. 'fc') or give the model a `head` attribute naming them")
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

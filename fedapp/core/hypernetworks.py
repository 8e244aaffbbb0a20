"""PeFLL's and pFedHN's networks: the embedding network phi that maps a client's data to a
descriptor v (client side), and the hypernetwork h that maps v to the client's model (server side)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from fedapp.core.models import LSTM, LeNet
from fedapp.core.records import Tensors

EMBEDDINGS = ("cnn", "mlp", "label", "unlabeled", "lstm")


class CNNEmbedding(nn.Module):
    """phi(x, y): the client CNN on the image with one-hot(y) appended as C constant channels."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, dim: int, labels: bool = True):
        super().__init__()
        self.num_classes = num_classes if labels else 0
        self.net = LeNet((input_shape[0] + self.num_classes, *input_shape[1:]), dim)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.num_classes:
            planes = F.one_hot(y, self.num_classes).to(x.dtype)[:, :, None, None]
            x = torch.cat([x, planes.expand(-1, -1, *x.shape[2:])], 1)
        return self.net(x)


class LabelEmbedding(nn.Module):
    """phi(x, y) = W one-hot(y) + b: the descriptor is a linear map of the label histogram."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, dim: int):
        super().__init__()
        self.num_classes = num_classes
        self.fc = nn.Linear(num_classes, dim)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.fc(F.one_hot(y, self.num_classes).float())


class FeatureEmbedding(nn.Module):
    """phi(x, y) = W [x, one-hot(y)] + b on data that is not images (tabular features, token ids as
    numbers): the counterpart of ``CNNEmbedding`` for a flat input."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, dim: int, labels: bool = True):
        super().__init__()
        self.num_classes = num_classes if labels else 0
        self.fc = nn.Linear(math.prod(input_shape) + self.num_classes, dim)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        parts = [x.flatten(1).float()] + ([F.one_hot(y, self.num_classes).float()] if self.num_classes else [])
        return self.fc(torch.cat(parts, 1))


class MLPEmbedding(nn.Module):
    """phi(x, y) = W2 relu(W1 [x, one-hot(y)] + b1) + b2: the paper's "single hidden layer fully connected
    network" embedding (its Table 9), on the flattened image and the one-hot label. The width is the authors'
    code's embedding hidden size (``--embed-hid``, 20); their ``--embed-model mlp`` is a linear map of the
    label alone, ``label`` here."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, dim: int, hidden: int = 20):
        super().__init__()
        self.num_classes = num_classes
        self.net = nn.Sequential(nn.Linear(math.prod(input_shape) + num_classes, hidden), nn.ReLU(),
                                 nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([x.flatten(1).float(), F.one_hot(y, self.num_classes).float()], 1))


class LSTMEmbedding(nn.Module):
    """phi(x, y) on character windows (PeFLL's Shakespeare experiment: "the LSTM model from Caldas et al.
    as the embedding network"): LEAF's LSTM with l outputs, read over the window followed by its label
    character, so a labelled example is one text of len(x) + 1 characters."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, dim: int):
        super().__init__()
        self.net = LSTM(input_shape, dim, vocab_size=num_classes)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([x.long(), y.long()[:, None]], 1))


def embedding_network(kind: str, input_shape: tuple[int, ...], num_classes: int, dim: int) -> nn.Module:
    """phi of ``pefll.embedding`` for inputs of ``input_shape``: images (C, H, W) or anything else;
    ``lstm`` for next-token tasks, whose labels are token ids (classes = vocabulary)."""
    if kind == "label":
        return LabelEmbedding(input_shape, num_classes, dim)
    if kind == "lstm":
        return LSTMEmbedding(input_shape, num_classes, dim)
    if kind == "mlp":
        return MLPEmbedding(input_shape, num_classes, dim)
    if len(input_shape) != 3:
        return FeatureEmbedding(input_shape, num_classes, dim, labels=kind == "cnn")
    return CNNEmbedding(input_shape, num_classes, dim, labels=kind == "cnn")


class HyperNetwork(nn.Module):
    """h(v): MLP dim -> 100 -> 100 -> 100 -> 100, one linear head per client-model tensor.

    ``final_relu``: a ReLU after the last hidden layer too (the paper's Table 5); without it
    the body ends linearly, as the authors' code's CNNHyper does."""

    def __init__(self, dim: int, shapes: dict[str, torch.Size], hidden: int = 100, layers: int = 4,
                 final_relu: bool = True):
        super().__init__()
        sizes = [dim] + [hidden] * layers
        body: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            body += [nn.Linear(a, b), nn.ReLU()]
        self.body = nn.Sequential(*(body if final_relu else body[:-1]))
        self.shapes = dict(shapes)
        self.heads = nn.ModuleList(nn.Linear(hidden, torch.Size(s).numel()) for s in self.shapes.values())

    def forward(self, v: torch.Tensor) -> Tensors:
        """One model from v of shape (dim,), or one per row from v of shape (n, dim)."""
        z = self.body(v)
        return {k: head(z).view(*z.shape[:-1], *s) for (k, s), head in zip(self.shapes.items(), self.heads)}

"""A user's own model package, as the docs page "Your own model and data" uses it: fedapp imports
``mynet:build`` from it (the package is installed, or its folder is on ``PYTHONPATH``)."""

from __future__ import annotations

import math

from torch import nn


class TabularNet(nn.Module):
    """A small MLP for feature vectors: a body of two hidden layers and a linear classifier.

    ``head`` names the modules an algorithm that personalises or averages the head separately
    (FedALS, FedRep, HCCT-P) treats as the head; everything else is the body."""

    head = ("classifier",)

    def __init__(self, num_features: int, num_classes: int, hidden: int = 32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(num_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, x):
        return self.classifier(self.body(x.flatten(1)))


def build(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """fedapp calls this with the data's input shape (here (features,)) and its number of classes."""
    return TabularNet(math.prod(input_shape), num_classes)

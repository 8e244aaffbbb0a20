"""The model and the data, as Flower's quickstart's ``task.py`` holds them.

Each client draws its own data: a seeded 10-class problem on 60 features whose labels come from
one fixed linear teacher, so the clients learn the same task from different samples.
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    """A two-layer perceptron. fedapp's server builds it as ``Net(input_shape, num_classes)``
    (run config ``model = "plainapp.task:Net"``) with its dataset's shape: 60 features, 10 classes."""

    def __init__(self, input_shape=(60,), num_classes=10):
        super().__init__()
        self.fc1 = nn.Linear(input_shape[0], 32)
        self.fc2 = nn.Linear(32, num_classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def load_data(partition_id: int, num_partitions: int, batch_size: int = 32):
    """This client's training and test loaders: 200 and 50 examples of its own."""
    teacher = torch.randn(60, 10, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1000 + partition_id)
    x = torch.randn(250, 60, generator=g)
    y = (x @ teacher).argmax(dim=1)
    train = TensorDataset(x[:200], y[:200])
    return (DataLoader(train, batch_size=batch_size, shuffle=True, generator=g),
            DataLoader(TensorDataset(x[200:], y[200:]), batch_size=batch_size))


def train(net, trainloader, epochs, lr, device):
    """Train on the training set; the mean loss of the last epoch."""
    net.to(device).train()
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    criterion = nn.CrossEntropyLoss()
    for _ in range(epochs):
        running = 0.0
        for x, y in trainloader:
            optimizer.zero_grad()
            loss = criterion(net(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            running += loss.item()
    return running / len(trainloader)


def test(net, testloader, device):
    """Loss and accuracy on the test set."""
    net.to(device).eval()
    criterion = nn.CrossEntropyLoss(reduction="sum")
    loss, correct = 0.0, 0
    with torch.no_grad():
        for x, y in testloader:
            out = net(x.to(device))
            loss += criterion(out, y.to(device)).item()
            correct += (out.argmax(1) == y.to(device)).sum().item()
    n = len(testloader.dataset)
    return loss / n, correct / n

"""fedapp: federated-learning algorithms as Flower strategies with matching clients."""

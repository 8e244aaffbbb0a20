"""fedapp's FedSMOO in your own ServerApp and ClientApp."""

"""Client-side algorithms: one module per algorithm, each matching a server strategy."""

"""Server-side strategies: one module per algorithm, on the shared machinery in ``base``."""

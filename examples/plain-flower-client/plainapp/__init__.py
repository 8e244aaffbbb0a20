"""A plain Flower app (Flower's quickstart layout) whose ClientApp joins fedapp runs."""

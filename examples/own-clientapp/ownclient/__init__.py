"""Your ClientApp with fedapp's SCAFFOLD client update."""

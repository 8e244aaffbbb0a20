"""fedapp's core: what the algorithms (``strategies/``, ``clients/``) stand on.

The run config's types and common keys, data, models, records, local training, the maths both
sides share (aggregation, perturbation, hypernetworks, the body/head split), the experiment built
from a run config, and the transport helpers the strategies' driver uses (reply spill, pick-up,
site table, Flower internals behind ``compat``). Nothing here imports an algorithm or
``fedapp.runtime`` (``tests/test_imports.py``).
"""

"""fedapp's run-time layer: what runs the algorithms.

The ServerApp and ClientApp, the registry of algorithms and the full run-config schema built from
it, the launcher, the in-process engine, checkpoints, results, faults, the watchdog and the
preflight check. It imports the core and the algorithms; neither imports it, apart from the
exceptions ``tests/test_imports.py`` names.
"""

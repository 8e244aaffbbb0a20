"""Experiment configs, sweep runners, benchmarks and plots."""

"""Benchmarks: ``python -m bench`` runs them all; each ``bench/bench_*.py`` runs alone too."""

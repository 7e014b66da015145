"""Benchmarks: AWS requests, dollars, latency and scaling of EZGH Workflows runs.

`python -m bench` runs workflows on the local runtime (`ezgh dev`'s engine on moto), counts
every request the engine makes and prices it at the list prices in `bench/prices.py`.
See `docs/benchmarks.md`.
"""

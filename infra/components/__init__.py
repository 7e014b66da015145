"""One construct per capability, each generated from the topology.

The package is deliberately not called `constructs`: `python3 infra/app.py` puts `infra/` on
`sys.path`, and a local `constructs` package would shadow the `constructs` library.
"""

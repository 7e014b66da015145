"""The EzFlow graph interpreter: a workflow written with our own SDK (`ezgh_workflows`),
the engine's own push app in every project (no project's app: `service/flow_hosting.py`).
A flow's job is a run of its workflow `flow`; each node is a step. See docs/flows.md.
"""

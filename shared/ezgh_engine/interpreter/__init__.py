"""The EzFlow graph interpreter: a workflow written with our own SDK (`ezgh_workflows`),
hosted by the engine as the push app `ezgh-flows`. A flow's job is a run of its workflow
`flow`; each node is a step. See docs/flows.md.
"""

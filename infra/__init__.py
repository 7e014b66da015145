"""The CDK app that deploys EZGH Workflows into one AWS account (see docs/deploy.md).

Everything here is generated from `ezgh_engine.topology.TOPOLOGY`: tables, queues, functions
and event sources are declared there once.
"""

"""Adapters: the only modules that talk to AWS (boto3) or to apps over HTTP."""

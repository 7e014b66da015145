"""EzFlow graph workflows, the pure part: the graph model, its validator, JMESPath templating
and the interpreter's planning (which node runs next, with which input, which are SKIPPED).

Nothing here reads time, randomness or AWS; the interpreter workflow
(`ezgh_engine.interpreter`) and the flows service build on it.
"""

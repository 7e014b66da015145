"""What the engine shows of its runs: structured logs, metrics, traces and `ezgh dev` lines.

One emission point per fact (`core.run_facts`): the stream's reader of run and step changes
(`service.observe`) and the invoker (an invocation and its app's latency) call
`emit.record(fact)`, which turns it into

- metrics in CloudWatch's embedded metric format (`metrics`, on Powertools' EMF provider):
  a line of the function's log that CloudWatch reads as metrics, no API call;
- a structured log line (Powertools' JSON logger) carrying the run, step, invocation and
  app IDs (`logs`: every engine log line carries the IDs of the work it is about);
- a segment of the run's trace (`traces`: X-Ray segment documents with IDs derived from the
  run, sent with `PutTraceSegments`, for the runs `EZGH_TRACE_SAMPLE_RATE` samples);
- under `ezgh dev`, one human line (`progress`).

Queue records (their age, redeliveries) are counted by each SQS-fed handler
(`queues.record_batch`), and throttles where the engine's clients retry them (`adapters.aws`).
Deployed, EMF documents go to the function's log (stdout); under `ezgh dev` they go to
`<state dir>/telemetry/metrics.jsonl` (`sinks`), so the same documents can be read there.
"""

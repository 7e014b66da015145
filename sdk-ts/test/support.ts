/** Running one invocation of a workflow in process, for the SDK's own rules: the request is
 * built here, and step calls are answered as the engine answers a fresh step (`started`,
 * `ok`), each noted; what the engine records is its own tests' concern (the golden exchanges
 * and test/e2e.test.ts hold the SDK to the real engine). */

import { Invocation } from "../src/driver.js";
import type { Answer, HistoryPage, InvokeRequest, Op, RecordedStep } from "../src/protocol/wire.js";
import type { StateReader, StepResult, StepTransport } from "../src/transport.js";
import type { Workflow } from "../src/workflow.js";

export class NotingTransport implements StepTransport {
  readonly calls: Op[][] = [];
  constructor(private readonly answer: (op: Op) => StepResult = fresh) {}

  async send(ops: Op[]): Promise<StepResult[]> {
    this.calls.push(ops);
    return ops.map(this.answer);
  }

  get ops(): Op[] {
    return this.calls.flat();
  }
}

/** A `NotingTransport` that also serves the reads of protocol 1.5 (history pages by cursor,
 * values by reference), noting each. */
export class ReadingTransport extends NotingTransport implements StateReader {
  readonly reads: string[] = [];

  constructor(
    readonly pages: Record<string, HistoryPage> = {},
    readonly payloads: Record<string, unknown> = {},
    answer?: (op: Op) => StepResult,
  ) {
    super(answer);
  }

  async readHistory(cursor: string): Promise<HistoryPage> {
    this.reads.push(`history ${cursor}`);
    const page = this.pages[cursor];
    if (!page) throw new Error(`no page ${cursor}`);
    return page;
  }

  async readPayload(ref: string): Promise<unknown> {
    this.reads.push(`payload ${ref}`);
    if (!(ref in this.payloads)) throw new Error(`no payload ${ref}`);
    return structuredClone(this.payloads[ref]);
  }
}

export function fresh(op: Op): StepResult {
  if (op.op === "start") return { stepId: op.stepId, result: "started", attempt: op.attempt };
  if (op.op === "callback") return { stepId: op.stepId, result: "ok", url: `http://127.0.0.1:1/v1/callbacks/${String(op.stepId)}` };
  return { stepId: op.stepId, result: "ok" };
}

export function recorded(step: Partial<RecordedStep> & { id: string; kind: string; status: string }): RecordedStep {
  return {
    name: step.id.split("#")[0]!,
    attempt: 1,
    output: null,
    error: undefined,
    wakeAt: undefined,
    endedAt: undefined,
    branch: false,
    url: undefined,
    outputRef: undefined,
    ...step,
  };
}

type RequestOptions = Partial<InvokeRequest> & { status?: string; input?: unknown; inputRef?: string; runId?: string };

export function request(workflow: Workflow<any, any>, options: RequestOptions = {}): InvokeRequest {
  const run = { id: options.runId ?? "run-1", appId: "app-1", workflow: workflow.name, attempt: 1, status: options.status ?? "running" };
  return {
    invocationId: "inv-1",
    run: { ...run, input: options.inputRef ? null : (options.input ?? {}), inputRef: options.inputRef },
    steps: options.steps ?? [],
    api: { url: "http://127.0.0.1:1", token: "t" },
    branchStepId: options.branchStepId,
    protocol: options.protocol ?? "1.5",
    answerWithinSeconds: undefined,
    stepsCursor: options.stepsCursor,
  };
}

export async function invoke<T extends NotingTransport = NotingTransport>(
  workflow: Workflow<any, any>,
  options: RequestOptions = {},
  transport: T = new NotingTransport() as T,
): Promise<{ answer: Answer; transport: T }> {
  const answer = await new Invocation(workflow, request(workflow, options), transport, null).execute();
  return { answer, transport };
}

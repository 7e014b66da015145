/** Running one invocation of a workflow in process, for the SDK's own rules: the request is
 * built here, and step calls are answered as the engine answers a fresh step (`started`,
 * `ok`), each noted; what the engine records is its own tests' concern (the golden exchanges
 * and test/e2e.test.ts hold the SDK to the real engine). */

import { Invocation } from "../src/driver.js";
import type { Answer, InvokeRequest, Op, RecordedStep } from "../src/protocol/wire.js";
import type { StepResult, StepTransport } from "../src/transport.js";
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
    ...step,
  };
}

export function request(workflow: Workflow<any, any>, options: Partial<InvokeRequest> & { status?: string; input?: unknown } = {}): InvokeRequest {
  return {
    invocationId: "inv-1",
    run: { id: "run-1", appId: "app-1", workflow: workflow.name, input: options.input ?? {}, attempt: 1, status: options.status ?? "running" },
    steps: options.steps ?? [],
    api: { url: "http://127.0.0.1:1", token: "t" },
    branchStepId: options.branchStepId,
    protocol: "1.4",
    answerWithinSeconds: undefined,
  };
}

export async function invoke(
  workflow: Workflow<any, any>,
  options: Partial<InvokeRequest> & { status?: string; input?: unknown } = {},
  transport = new NotingTransport(),
): Promise<{ answer: Answer; transport: NotingTransport }> {
  const answer = await new Invocation(workflow, request(workflow, options), transport, null).execute();
  return { answer, transport };
}

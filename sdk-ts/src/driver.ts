/**
 * The invocation driver: runs a workflow once, replaying recorded steps (protocol 1.5).
 *
 * The workflow runs as ordinary async code. A step call registers a pending step and returns
 * a promise only the driver settles. The driver lets the workflow run until it blocks (every
 * reaction it made ready has run: a macrotask turn drains the microtask queue), so a round is
 * exactly the step calls made before the workflow waits on them. It then resolves the round's
 * steps in call order while no workflow code runs: recorded ones from the record, `value`
 * steps by a `record` op, `run` steps by running them inline. The outcomes are handed out only
 * when the whole round is resolved, in recorded end order, so the workflow moves in the same
 * rounds on the first run and on replay, and `Promise.race` picks the same winner.
 *
 * When only waits are pending (sleeps, callbacks, child runs, messages, retries, parallel
 * branches) the invocation suspends: the pending promises never settle, so no `try`/`catch`
 * in the workflow can swallow the suspension, and the abandoned workflow is garbage. Two or
 * more unrecorded `run` steps in one round are parallel: the engine runs each in a branch
 * invocation (`branchStepId`), which replays up to it, runs only it, and answers `branch`. In
 * a `cancelling` run, the round holding the first unrecorded step or pending wait ends those
 * steps with `RunCancelledError` (recorded `cancelled`); later steps (cleanup) run as usual.
 *
 * What a 1.5 request gives as references is read through the transport (a `StateReader`):
 * the rest of the history, page by page, and an input by reference before the workflow runs;
 * a step's output by reference only when the workflow reaches the step, so a long history of
 * large values is never all in memory at once because of the SDK. Values read are kept for
 * the run's next invocation in this process (`payloadCache.ts`).
 */

import { clock } from "./clock.js";
import {
  AbortInvocation,
  DuplicateStepNameError,
  EngineBusy,
  NondeterminismError,
  RunCancelledError,
  StepError,
  StepInStepError,
  TransportError,
  ValueRuleError,
  WorkflowRuleError,
  errorBody,
  errorMessage,
  errorName,
  type ErrorBody,
} from "./errors.js";
import { StepIds, isPatchMarker } from "./identity.js";
import { readPayload } from "./payloadCache.js";
import { STEP_ENDED_STATUSES } from "./protocol/rules.js";
import {
  answers,
  holdsStepEnds,
  isPendingRetry,
  withOps,
  type Answer,
  type InvokeRequest,
  type RecordedStep,
} from "./protocol/wire.js";
import {
  cancelStep,
  createCallback,
  fromRecord,
  recordValue,
  rejectStep,
  runStep,
  type Resolution,
  type StepRunScope,
} from "./runner.js";
import { StepCalls } from "./stepCalls.js";
import { Steps, type StepHost, type StepRequest } from "./steps.js";
import { isStateReader, type StateReader, type StepTransport } from "./transport.js";
import { roundtrip } from "./values.js";
import type { Context, Workflow } from "./workflow.js";

/** Past this fraction of the engine's wait (`answerWithinSeconds`), the held step ends are
 * sent by a step call before the answer, which may reach an engine that stopped reading. */
export const LATE_ANSWER_FRACTION = 0.5;
/** An answer carries the held step ends only while they are small: past this their own step
 * call sends them first, so an answer is its output (at most 1 MiB) and little more, within
 * what the engine takes of a pull worker's outcome (2 MiB) and a Lambda's answer (6 MB). */
export const ANSWER_HELD_BYTES = 256 * 1024;

interface PendingStep {
  stepId: string;
  request: StepRequest;
  recorded: RecordedStep | undefined;
  settle: (resolution: Resolution) => void;
  done: boolean;
  /** Left to a branch invocation of its own. */
  parallel: boolean;
  /** Failed in this invocation; the engine retries it then. */
  retryAt: string | undefined;
}

interface Finished {
  value?: unknown;
  error?: unknown;
  threw: boolean;
}

const NEVER = new Promise<never>(() => undefined);

/** Run ready callbacks until the workflow blocks: a macrotask turn comes after every
 * microtask (promise reaction) queued before it. `setImmediate` where the runtime has it. */
const nextTurn: () => Promise<void> =
  typeof globalThis.setImmediate === "function"
    ? () => new Promise((resolve) => globalThis.setImmediate(resolve))
    : () => new Promise((resolve) => setTimeout(resolve, 0));

function ended(pending: PendingStep): boolean {
  return pending.recorded !== undefined && STEP_ENDED_STATUSES.has(pending.recorded.status);
}

/** Not ended, and can only end in a later invocation: a wait, a pending retry, or a step
 * another (branch) invocation runs. */
function isWait(pending: PendingStep): boolean {
  if (ended(pending) || pending.request.reject) return false;
  if (pending.request.wait !== undefined) return true;
  const rec = pending.recorded;
  return Boolean(pending.parallel || pending.retryAt || (rec && (rec.branch || isPendingRetry(rec))));
}

function waitEntry(pending: PendingStep): Record<string, unknown> {
  const entry: Record<string, unknown> = {
    stepId: pending.stepId,
    name: pending.request.name,
    kind: pending.request.kind,
    ...(pending.request.wait ?? {}),
  };
  if (pending.parallel) entry.parallel = true;
  return entry;
}

/** The run's error for what the workflow threw. */
export function runError(error: unknown): ErrorBody {
  if (error instanceof StepError || error instanceof WorkflowRuleError || error instanceof RunCancelledError) {
    return error.toBody();
  }
  return errorBody("user", errorName(error), errorMessage(error));
}

/** One invocation of one workflow: `await new Invocation(...).execute()` gives the answer. */
export class Invocation implements StepHost, StepRunScope {
  private readonly began = clock.monotonic();
  private readonly calls: StepCalls;
  private readonly recorded: Map<string, RecordedStep>;
  private readonly ids = new StepIds();
  private pending: PendingStep[] = [];
  private pendingNames = new Set<string>();
  private violation: WorkflowRuleError | undefined;
  private stopped = false;
  private insideStep: string | undefined;
  private readonly cancelling: boolean;
  /** Delivered once per run: a step recorded `cancelled` means an earlier round did it. */
  private cancelDelivered: boolean;
  private readonly branch: string | undefined;
  private branchDone = false;
  private finished: Finished | undefined;
  private wake: (() => void) | undefined;
  private input: unknown;

  constructor(
    private readonly workflow: Workflow<any, any>,
    private readonly request: InvokeRequest,
    private readonly transport: StepTransport,
    private readonly deploymentId: string | null,
  ) {
    this.calls = new StepCalls(transport, holdsStepEnds(request), request.run.id, request.branchAttempt !== undefined);
    this.input = request.run.input;
    this.recorded = new Map(request.steps.map((step) => [step.id, step]));
    this.cancelling = request.run.status === "cancelling";
    this.cancelDelivered = request.steps.some((step) => step.status === "cancelled");
    this.branch = request.branchStepId;
  }

  // -- the step host (called by Steps) ---------------------------------------------------

  submit(request: StepRequest): Promise<[string, unknown]> {
    if (this.violation) return Promise.reject(this.violation);
    if (this.stopped) return NEVER; // the invocation answered: nothing more runs
    if (this.insideStep !== undefined) {
      const inside = this.insideStep;
      return Promise.reject(
        this.violate(
          new StepInStepError(
            `a step was called from inside the function of step ${JSON.stringify(inside)}; a step's function can't call steps`,
          ),
        ),
      );
    }
    let pending: PendingStep;
    let promise: Promise<[string, unknown]>;
    try {
      const stepId = request.waitFor ?? this.allocate(request);
      const recorded = this.recorded.get(stepId);
      if (recorded) this.checkReplay(stepId, recorded, request);
      let settle!: PendingStep["settle"];
      promise = new Promise<[string, unknown]>((resolve, reject) => {
        settle = (r) => (r.error ? reject(r.error) : resolve([stepId, r.value]));
      });
      pending = { stepId, request, recorded, settle, done: false, parallel: false, retryAt: undefined };
    } catch (error) {
      return Promise.reject(error);
    }
    this.pending.push(pending);
    if (request.explicitId === undefined && request.waitFor === undefined) this.pendingNames.add(request.name);
    this.wake?.();
    return promise;
  }

  /** Whether the run's record holds steps (patch markers aside) the workflow has not asked
   * for yet: the run went past this point on other code (`Steps.patched`). */
  historyContinues(): boolean {
    for (const stepId of this.recorded.keys()) {
      if (!this.ids.asked(stepId) && !isPatchMarker(stepId)) return true;
    }
    return false;
  }

  violate(error: WorkflowRuleError): WorkflowRuleError {
    if (!this.violation) {
      this.violation = error;
      this.wake?.();
    }
    return error;
  }

  // -- where a step's function runs (StepRunScope) ----------------------------------------

  enter(stepId: string): void {
    this.insideStep = stepId;
  }

  leave(): void {
    this.insideStep = undefined;
  }

  checkViolation(): void {
    if (this.violation) throw this.violation;
  }

  /** Fail closed when the code asks a recorded step for another kind or name (a step renamed
   * under an explicit `id` would otherwise replay someone else's result). */
  private checkReplay(stepId: string, recorded: RecordedStep, request: StepRequest): void {
    if (recorded.kind !== request.kind) {
      throw this.violate(
        new NondeterminismError(
          `step ${JSON.stringify(stepId)} was recorded with kind ${JSON.stringify(recorded.kind)}, but the workflow now asks for kind ${JSON.stringify(request.kind)} at this step`,
        ),
      );
    }
    if (request.waitFor === undefined && recorded.name && recorded.name !== request.name) {
      throw this.violate(
        new NondeterminismError(
          `step ${JSON.stringify(stepId)} was recorded with name ${JSON.stringify(recorded.name)}, but the workflow now asks for name ${JSON.stringify(request.name)} at this step`,
        ),
      );
    }
  }

  private allocate(request: StepRequest): string {
    if (request.explicitId === undefined && this.pendingNames.has(request.name)) {
      throw this.violate(
        new DuplicateStepNameError(
          `two steps named ${JSON.stringify(request.name)} are pending at the same time; steps pending together need distinct names or explicit ids`,
        ),
      );
    }
    try {
      return this.ids.allocate(request.name, request.explicitId);
    } catch (error) {
      if (error instanceof WorkflowRuleError) throw this.violate(error);
      throw error;
    }
  }

  // -- driving ---------------------------------------------------------------------------

  /** Run the invocation to its outcome (a protocol answer body). */
  async execute(): Promise<Answer> {
    try {
      await this.readState();
      this.startWorkflow();
      const answer = await this.drive();
      if (this.answerMayGoUnread() || this.calls.heldBytes() > ANSWER_HELD_BYTES) await this.calls.flushBeforeAnswer();
      return withOps(answer, this.calls.takeHeld());
    } catch (error) {
      this.stop();
      if (error instanceof AbortInvocation) return answers.aborted(error.reason, this.deploymentId);
      if (error instanceof EngineBusy) {
        // Not the app's fault: the engine delivers it again later. The answer carries the
        // held step ends (small ones), so the engine records them and those steps run once.
        const throttled = answers.throttled(error.message, error.retryAfter, this.deploymentId);
        const held = this.calls.heldBytes() > ANSWER_HELD_BYTES ? [] : this.calls.takeHeld();
        return withOps(throttled, held);
      }
      throw error;
    }
  }

  // -- what the request gave as references (1.5) ------------------------------------------

  private reader(): StateReader {
    if (!isStateReader(this.transport)) {
      throw new TransportError(
        "the invoke request gives values or history as references (protocol 1.5), and this step transport cannot read them",
      );
    }
    return this.transport;
  }

  /** Before the workflow runs: the rest of the history, page by page (a step the request or
   * an earlier page listed is as that one says: the engine lists every step not ended in the
   * request, or in the first page), and an input given as a reference. */
  private async readState(): Promise<void> {
    const { stepsCursor, run } = this.request;
    for (let cursor = stepsCursor; cursor; ) {
      const page = await this.reader().readHistory(cursor);
      for (const step of page.steps) if (!this.recorded.has(step.id)) this.recorded.set(step.id, step);
      cursor = page.nextCursor;
    }
    if (stepsCursor) this.cancelDelivered = [...this.recorded.values()].some((step) => step.status === "cancelled");
    if (run.inputRef) this.input = await readPayload(this.reader(), run.id, run.inputRef);
  }

  /** `recorded` with its output read, when the request gave it as a reference: read when the
   * workflow reaches the step. */
  private async withOutput(recorded: RecordedStep): Promise<RecordedStep> {
    if (recorded.outputRef === undefined || recorded.status !== "completed") return recorded;
    const output = await readPayload(this.reader(), this.request.run.id, recorded.outputRef);
    return { ...recorded, output, outputRef: undefined };
  }

  private answerMayGoUnread(): boolean {
    const within = this.request.answerWithinSeconds;
    return within !== undefined && clock.monotonic() - this.began >= within * LATE_ANSWER_FRACTION;
  }

  private async drive(): Promise<Answer> {
    for (;;) {
      await nextTurn();
      if (this.branchDone) return this.endBranch();
      if (this.violation) return this.endFailed(this.violation.toBody());
      if (this.finished) return this.finish(this.finished);
      const batch = this.unresolved();
      if (!batch.length) {
        await new Promise<void>((resolve) => (this.wake = resolve)); // a timer in workflow code
        this.wake = undefined;
      } else if (!(await this.resolveRound(batch))) {
        return this.suspend(batch);
      }
    }
  }

  private unresolved(): PendingStep[] {
    this.pending = this.pending.filter((p) => !p.done);
    this.pendingNames = new Set(this.pending.filter((p) => p.request.explicitId === undefined).map((p) => p.request.name));
    return [...this.pending];
  }

  /** Resolve every pending step that can be; false when all of them are waits. */
  private async resolveRound(batch: PendingStep[]): Promise<boolean> {
    this.calls.roundOf(batch.length);
    const cancelRound = this.cancelling && !this.cancelDelivered && this.branch === undefined;
    const freshRuns = batch.filter((p) => p.request.kind === "run" && p.recorded === undefined);
    if (freshRuns.length >= 2 && !cancelRound && this.branch === undefined) {
      for (const pending of freshRuns) pending.parallel = true; // one branch invocation each
    }
    const resolved: Array<[PendingStep, Resolution]> = [];
    for (const pending of batch) {
      try {
        const resolution = await this.resolve(pending, cancelRound);
        if (resolution) resolved.push([pending, resolution]);
      } catch (error) {
        if (!(error instanceof WorkflowRuleError)) throw error;
        this.violate(error);
      }
      if (this.violation || this.branchDone) return true;
    }
    // Hand outcomes out in the order the steps ended (recorded ones by their end time): a
    // race then picks the same winner on every replay.
    const order = (p: PendingStep) => p.recorded?.endedAt || "~";
    resolved.sort(([a], [b]) => (order(a) < order(b) ? -1 : order(a) > order(b) ? 1 : 0));
    for (const [pending, resolution] of resolved) {
      this.pendingNames.delete(pending.request.name);
      if (!pending.done) {
        pending.done = true;
        pending.settle(resolution);
      }
    }
    return resolved.length > 0;
  }

  /** The step's outcome now, or undefined when it stays pending (a wait). */
  private async resolve(pending: PendingStep, cancelRound: boolean): Promise<Resolution | undefined> {
    const { recorded, request } = pending;
    if (request.kind === "callback" && request.waitFor === undefined && recorded?.url) {
      return { value: recorded.url }; // creating it answers its URL, whatever happened since
    }
    if (ended(pending)) return fromRecord(await this.withOutput(recorded!));
    if (this.branch !== undefined) {
      // A branch invocation runs its one step, nothing else.
      if (pending.stepId !== this.branch) return undefined;
      this.branchDone = true;
      return this.run(pending);
    }
    if (cancelRound) {
      this.cancelDelivered = true; // this round delivers the cancellation, to all its steps
      return cancelStep(this.calls, pending.stepId, request);
    }
    if (request.reject) return rejectStep(this.calls, pending.stepId, request);
    if (isWait(pending)) return undefined;
    if (request.kind === "value") return recordValue(this.calls, pending.stepId, request);
    if (request.kind === "callback") return createCallback(this.calls, pending.stepId, request);
    return this.run(pending);
  }

  private async run(pending: PendingStep): Promise<Resolution | undefined> {
    // A branch invocation's step the engine started (`branch.attempt`): no `start`.
    const started = pending.stepId === this.branch ? this.request.branchAttempt : undefined;
    const resolution = await runStep(
      this.calls,
      this,
      this.request.run.id,
      pending.stepId,
      pending.request,
      pending.recorded,
      started,
    );
    if (resolution.retryAt !== undefined) {
      pending.retryAt = resolution.retryAt || "pending";
      return undefined;
    }
    return resolution;
  }

  // -- ending ----------------------------------------------------------------------------

  private suspend(batch: PendingStep[]): Answer {
    if (this.branch !== undefined) return this.endBranch();
    const waits = batch.filter(isWait).map(waitEntry);
    this.stop();
    return answers.suspended(waits, this.deploymentId);
  }

  /** A branch invocation ends once its step ran (or the workflow never reached it). */
  private endBranch(): Answer {
    this.stop();
    return answers.branchEnded(this.branch!, this.deploymentId);
  }

  private endFailed(error: ErrorBody): Answer {
    if (this.branch !== undefined) return this.endBranch();
    this.stop();
    // However it ends once cancelling, the run ends cancelled.
    return this.cancelling ? answers.cancelled(this.deploymentId) : answers.failed(error, this.deploymentId);
  }

  private finish(finished: Finished): Answer {
    if (this.branch !== undefined) return this.endBranch();
    if (this.cancelling) {
      this.stop();
      return answers.cancelled(this.deploymentId);
    }
    if (finished.threw) return this.endFailed(runError(finished.error));
    let output: unknown;
    try {
      output = roundtrip(finished.value);
    } catch (error) {
      if (error instanceof ValueRuleError) return this.endFailed(error.toBody());
      throw error;
    }
    this.stop();
    return answers.completed(output, this.deploymentId);
  }

  /** Nothing of the workflow runs on: pending step calls never settle, later ones neither. */
  private stop(): void {
    this.stopped = true;
    this.pending = [];
  }

  // -- starting --------------------------------------------------------------------------

  private startWorkflow(): void {
    const run = this.request.run;
    const context: Context = Object.freeze({ input: this.input, step: new Steps(this), runId: run.id, attempt: run.attempt });
    const finish = (finished: Finished) => {
      this.finished = finished;
      this.wake?.();
    };
    let started: Promise<unknown>;
    try {
      started = Promise.resolve(this.workflow.fn(context));
    } catch (error) {
      started = Promise.reject(error);
    }
    started.then(
      (value) => finish({ value, threw: false }),
      (error) => finish({ error, threw: true }),
    );
  }
}

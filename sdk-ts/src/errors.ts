/**
 * The SDK's errors.
 *
 * - `StepError`: a step failed; the workflow may catch it.
 * - `NonRetryableError`: throw it from a step's function to fail the step at once.
 * - `RunCancelledError`: the run was cancelled; cleanup code may catch it and still run steps.
 * - `WorkflowRuleError` subclasses: the workflow broke a rule the SDK enforces. The invocation
 *   remembers the first one, so the run fails with it even when user code catches it.
 * - `ValueRuleError` subclasses: a value is not JSON by the docs' rules, or is too large; a
 *   step fails with it at once, without retrying.
 */

import { MAX_ERROR_FIELD_BYTES, MAX_ERROR_MESSAGE_BYTES, clip } from "./protocol/rules.js";

/** The wire shape of an error: `{code, name, message}`. */
export interface ErrorBody {
  code: string;
  name: string;
  message: string;
}

/** The wire shape of an error, each field cut to what the engine keeps (`protocol/rules.ts`),
 * so a long message never fails its step's call and reads the same on replay. */
export function errorBody(code: string, name: string, message: string): ErrorBody {
  return {
    code: clip(code, MAX_ERROR_FIELD_BYTES),
    name: clip(name, MAX_ERROR_FIELD_BYTES),
    message: clip(message, MAX_ERROR_MESSAGE_BYTES),
  };
}

/** The class name of what was thrown: `err.name` when set, else its constructor's name. */
export function errorName(error: unknown): string {
  if (error instanceof Error) {
    if (error.name && error.name !== "Error") return error.name;
    const ctor = (error as { constructor?: { name?: unknown } }).constructor?.name;
    return typeof ctor === "string" && ctor ? ctor : "Error";
  }
  return "Error";
}

export function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message;
  if (typeof error === "string") return error;
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    return String(error);
  }
}

/** A step failed. Thrown by the step call in the workflow, first run and replay alike. */
export class StepError extends Error {
  override readonly name = "StepError";
  /** `user` for an error the step's function threw, or a `workflows.*` code. */
  readonly code: string;
  /** The name of the error the step failed with (its class name). */
  readonly errorName: string;
  readonly stepId: string;

  constructor(init: { stepId: string; code: string; errorName: string; message: string }) {
    super(init.message);
    this.stepId = init.stepId;
    this.code = init.code;
    this.errorName = init.errorName;
  }

  static fromBody(stepId: string, body: unknown): StepError {
    const b = (body && typeof body === "object" ? body : {}) as Record<string, unknown>;
    return new StepError({
      stepId,
      code: String(b.code || "user"),
      errorName: String(b.name || "Error"),
      message: String(b.message ?? ""),
    });
  }

  toBody(): ErrorBody {
    return errorBody(this.code, this.errorName, this.message);
  }
}

/** Throw it (or a subclass) from a step's function to fail the step at once, whatever its
 * `retries`. The step's error names the class you threw. */
export class NonRetryableError extends Error {
  constructor(message?: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The run was cancelled. Thrown at the next step that isn't recorded and by pending waits;
 * `catch`/`finally` cleanup sees it and may still run steps. However the workflow ends once
 * it was thrown, the run ends `cancelled`. */
export class RunCancelledError extends Error {
  override readonly name = "RunCancelledError";
  readonly code = "workflows.cancelled";

  constructor(message = "the run was cancelled") {
    super(message);
  }

  toBody(): ErrorBody {
    return errorBody(this.code, this.name, this.message);
  }
}

/** The workflow broke a rule the SDK enforces; the run fails with `code`. */
export class WorkflowRuleError extends Error {
  readonly code: string = "workflows.rule";

  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }

  toBody(): ErrorBody {
    return errorBody(this.code, this.name, this.message);
  }
}

export class DuplicateStepNameError extends WorkflowRuleError {
  override readonly code = "workflows.duplicate_step_name";
}

export class NondeterminismError extends WorkflowRuleError {
  override readonly code = "workflows.nondeterminism";
}

export class StepInStepError extends WorkflowRuleError {
  override readonly code = "workflows.step_in_step";
}

export class UnknownWorkflowError extends WorkflowRuleError {
  override readonly code = "workflows.unknown_workflow";
}

/** A value is not an allowed JSON value, or is too large. Never retried. */
export class ValueRuleError extends Error {
  readonly code: string = "workflows.invalid_value";

  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }

  toBody(): ErrorBody {
    return errorBody(this.code, this.name, this.message);
  }
}

export class InvalidValueError extends ValueRuleError {
  override readonly code = "workflows.invalid_value";
}

export class OutputTooLargeError extends ValueRuleError {
  override readonly code = "workflows.output_too_large";
}

/** The engine refused a step call as stale (or the token expired): the invocation ends
 * `aborted`. Internal: never reaches workflow code. */
export class AbortInvocation extends Error {
  constructor(readonly reason: string) {
    super(reason);
    this.name = "AbortInvocation";
  }
}

/** A step call could not be delivered (after retries) or was refused as invalid. */
export class TransportError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TransportError";
  }
}

/** A call the engine kept answering busy or throttled (429, 503) past its retries: not the
 * app's fault. The invocation answers `throttled` (docs/protocol.md section 1.2), which the
 * engine delivers again later without counting a failed delivery. */
export class EngineBusy extends TransportError {
  constructor(
    message: string,
    /** Seconds, the last answer's `Retry-After`. */
    readonly retryAfter: number | null,
  ) {
    super(message);
    this.name = "EngineBusy";
  }
}

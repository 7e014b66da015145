/** `workflow(name, fn)`: a workflow is a name and the function that runs it. */

import type { Steps } from "./steps.js";

const NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** What a workflow function receives. */
export interface Context<I = any> {
  /** The run's JSON input. */
  readonly input: I;
  /** The durable step API. */
  readonly step: Steps;
  /** The run's ID. */
  readonly runId: string;
  /** The run's attempt, from 1 (a retried run counts up). */
  readonly attempt: number;
}

export type WorkflowFn<I, O> = (context: Context<I>) => O | Promise<O>;

/** A workflow: a name (`^[A-Za-z0-9_-]{1,64}$`) and its function. */
export interface Workflow<I = any, O = unknown> {
  readonly name: string;
  readonly fn: WorkflowFn<I, O>;
}

const WORKFLOW = Symbol.for("ezgh.workflow");

/** Register `fn` as the workflow `name` (a `RangeError` for a name that does not match
 * `^[A-Za-z0-9_-]{1,64}$`). Serve it with a `PushApp` or a `Worker`. */
export function workflow<I = any, O = unknown>(name: string, fn: WorkflowFn<I, O>): Workflow<I, O> {
  if (typeof name !== "string" || !NAME.test(name)) {
    throw new RangeError(`invalid workflow name ${JSON.stringify(name)}: must match ^[A-Za-z0-9_-]{1,64}$`);
  }
  if (typeof fn !== "function") throw new TypeError("a workflow needs a function taking its context");
  return Object.freeze({ name, fn, [WORKFLOW]: true });
}

/** The workflows by name; a `TypeError` for what is not a workflow, a `RangeError` for a
 * name given twice. */
export function indexWorkflows(workflows: Iterable<Workflow<any, any>>): Map<string, Workflow<any, any>> {
  const index = new Map<string, Workflow<any, any>>();
  for (const item of workflows) {
    if (!item || (item as unknown as Record<symbol, unknown>)[WORKFLOW] !== true) {
      throw new TypeError(`${String(item)} is not a workflow: make it with workflow(name, fn)`);
    }
    if (index.has(item.name)) throw new RangeError(`two workflows are named ${JSON.stringify(item.name)}`);
    index.set(item.name, item);
  }
  return index;
}

/**
 * The invocation's step calls, with the ends of steps held back (protocol 1.3, section 2.1).
 *
 * A `run` step's end (`complete`, a `fail` that is final) is not sent on its own: it rides the
 * invocation's next step call (typically the next step's `start`) or, when none comes, the
 * invocation's answer (`ops`). So a sequential step costs one call, and its result is still
 * recorded before any later step starts. When the engine answers a held end with another
 * outcome than it carried (another invocation recorded the step first), the workflow already
 * went on with this invocation's value: the invocation aborts and the engine replays the run.
 */

import { AbortInvocation, TransportError } from "./errors.js";
import { endDiffers } from "./protocol/rules.js";
import type { Op } from "./protocol/wire.js";
import type { StepResult, StepTransport } from "./transport.js";

/** At most this many ends are held before they are sent on their own (the engine takes up to
 * 25 ops a call, and an answer carries at most 25). */
export const MAX_HELD = 20;

export class StepCalls {
  private held: Op[] = [];
  private holdInRound = true;

  constructor(
    private readonly transport: StepTransport,
    private readonly hold: boolean,
  ) {}

  /** A round of `pending` steps begins. Ends are held only in a round of one step: in a race
   * or a gather each end is sent when its step ends (replay orders them by recorded end). */
  roundOf(pending: number): void {
    this.holdInRound = pending === 1;
  }

  /** Send `ops` after the held ends; one result per op of `ops`. */
  async send(ops: Op[]): Promise<StepResult[]> {
    const held = this.held;
    this.held = [];
    const results = await this.transport.send([...held, ...ops]);
    held.forEach((op, i) => checkHeldResult(op, results[i]));
    return results.slice(held.length);
  }

  /** A step's end: held (undefined), or sent now when not holding (its result). */
  async end(op: Op): Promise<StepResult | undefined> {
    if (!(this.hold && this.holdInRound)) return (await this.send([op]))[0];
    this.held.push(op);
    if (this.held.length >= MAX_HELD) await this.flush();
    return undefined;
  }

  /** Send the held ends now. */
  async flush(): Promise<void> {
    if (this.held.length) await this.send([]);
  }

  /** Send the held ends now, as the answer may go unread; a call that cannot be delivered
   * keeps them for the answer instead (the steps API is another route than the answer's). */
  async flushBeforeAnswer(): Promise<void> {
    const held = [...this.held];
    try {
      await this.flush();
    } catch (error) {
      if (!(error instanceof TransportError)) throw error;
      console.warn(`ezgh: sending the held step ends failed (${error.message}); the answer carries them`);
      this.held = [...held, ...this.held];
    }
  }

  /** The held ends, for the invocation's answer; none are held afterwards. */
  takeHeld(): Op[] {
    const held = this.held;
    this.held = [];
    return held;
  }
}

function checkHeldResult(op: Op, result: unknown): void {
  if (result && typeof result === "object" && endDiffers(op, result as Record<string, unknown>)) {
    throw new AbortInvocation(`step ${JSON.stringify(op.stepId)} was recorded by another invocation with another outcome`);
  }
}

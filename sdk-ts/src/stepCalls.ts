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

import { AbortInvocation, EngineBusy, TransportError } from "./errors.js";
import { readPayload } from "./payloadCache.js";
import { endDiffers } from "./protocol/rules.js";
import { recordedIn, type Op, type RecordedStep } from "./protocol/wire.js";
import { isStateReader, type StepResult, type StepTransport } from "./transport.js";
import { byteLength } from "./values.js";

/** At most this many ends are held before they are sent on their own (the engine takes up to
 * 25 ops a call, and an answer carries at most 25). */
export const MAX_HELD = 20;

export class StepCalls {
  private held: Op[] = [];
  private holdInRound = true;

  constructor(
    private readonly transport: StepTransport,
    private readonly hold: boolean,
    private readonly runId = "",
    /** A branch invocation's one end is held whatever its round (it ends the invocation). */
    private readonly everyRound = false,
  ) {}

  /** A round of `pending` steps begins. Ends are held only in a round of one step: in a race
   * or a gather each end is sent when its step ends (replay orders them by recorded end). */
  roundOf(pending: number): void {
    this.holdInRound = pending === 1 || this.everyRound;
  }

  /** Send `ops` after the held ends; one result per op of `ops`. */
  async send(ops: Op[]): Promise<StepResult[]> {
    const held = this.held;
    this.held = [];
    let results: StepResult[];
    try {
      results = await this.transport.send([...held, ...ops]);
    } catch (error) {
      // Not recorded, or not known to be: they stay held, and the `throttled` answer
      // carries them (a step whose end is lost runs again; one carried runs once).
      if (error instanceof EngineBusy) this.held = [...held, ...this.held];
      throw error;
    }
    for (const [i, op] of held.entries()) checkHeldResult(op, await this.withOutput(results[i]));
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

  /** The recorded step of a `recorded` result (undefined for `started`/`ok`/`retry`), its
   * output read when the engine gave it as a reference (1.5). */
  async recorded(result: unknown): Promise<RecordedStep | undefined> {
    const step = recordedIn(result);
    if (step?.outputRef === undefined || step.status !== "completed") return step;
    if (!isStateReader(this.transport)) {
      throw new TransportError(`step ${JSON.stringify(step.id)} was answered by reference; this transport cannot read it`);
    }
    const output = await readPayload(this.transport, this.runId, step.outputRef);
    return { ...step, output, outputRef: undefined };
  }

  /** A `recorded` result whose output the engine gave as a reference, with the output read:
   * what `checkHeldResult` compares with the end it carried. */
  private async withOutput(result: StepResult | undefined): Promise<StepResult | undefined> {
    const step = result?.step as Record<string, unknown> | undefined;
    if (!step || typeof step !== "object" || typeof step.outputRef !== "string") return result;
    const full = await this.recorded(result);
    const { outputRef: _, ...plain } = step;
    return { ...result, step: { ...plain, output: full?.output ?? null } };
  }

  /** The encoded size of the ends held now (what the answer would carry), in UTF-8 bytes. */
  heldBytes(): number {
    return this.held.reduce((sum, op) => sum + byteLength(JSON.stringify(op)), 0);
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

/**
 * Step identity (protocol section 3, seed docs "How steps are identified").
 *
 * A step without `{ id }` is `<name>#<n>`, `n` counting from 1 the steps of that name asked
 * for so far (steps with an explicit ID do not count). An explicit ID matches
 * `^[A-Za-z0-9._:-]{1,128}$` and names one step for the whole run.
 *
 * A patch marker (`step.patched(patchId)`) is a `value` step with the explicit ID
 * `patched:<patchId>`: replay and the replay gate (`ezgh workflows replay-check`, the Python
 * SDK's test kit) know it by that prefix, whichever SDK recorded it.
 */

import { DuplicateStepNameError } from "./errors.js";
import { byteLength, isWellFormed } from "./values.js";

export const NAME_MAX_BYTES = 256;
const EXPLICIT_ID = /^[A-Za-z0-9._:-]{1,128}$/;
export const PATCH_PREFIX = "patched:";

/** A step name: 1 to 256 bytes of UTF-8 without NUL; `TypeError`/`RangeError` otherwise. */
export function validateName(name: unknown): string {
  if (typeof name !== "string") throw new TypeError(`step name must be a string, not ${typeof name}`);
  const size = byteLength(name);
  if (size < 1 || size > NAME_MAX_BYTES) {
    throw new RangeError(`step name must be 1 to ${NAME_MAX_BYTES} bytes of UTF-8, got ${size}`);
  }
  if (name.includes("\u0000")) throw new RangeError("step name must not contain NUL characters");
  if (!isWellFormed(name)) throw new RangeError("step name must be text (a lone UTF-16 surrogate is not)");
  return name;
}

/** An explicit step ID matching `^[A-Za-z0-9._:-]{1,128}$`; `RangeError` otherwise. */
export function validateExplicitId(stepId: unknown): string {
  if (typeof stepId !== "string" || !EXPLICIT_ID.test(stepId)) {
    throw new RangeError(`invalid step id ${JSON.stringify(stepId)}: must match ^[A-Za-z0-9._:-]{1,128}$`);
  }
  return stepId;
}

/** The step ID of patch `patchId`'s marker; `RangeError` for an ID that does not match
 * `^[A-Za-z0-9._:-]{1,120}$`. */
export function patchStepId(patchId: unknown): string {
  if (typeof patchId !== "string" || !patchId) throw new RangeError(`invalid patch id ${JSON.stringify(patchId)}: a non-empty string`);
  const stepId = PATCH_PREFIX + patchId;
  if (!EXPLICIT_ID.test(stepId)) {
    throw new RangeError(`invalid patch id ${JSON.stringify(patchId)}: must match ^[A-Za-z0-9._:-]{1,${128 - PATCH_PREFIX.length}}$`);
  }
  return stepId;
}

/** Whether a recorded step is a patch marker (`patchStepId`). */
export function isPatchMarker(stepId: string): boolean {
  return stepId.startsWith(PATCH_PREFIX);
}

/** Allocates step IDs for one invocation, in the order the workflow asks for steps. */
export class StepIds {
  private readonly counts = new Map<string, number>();
  private readonly explicit = new Set<string>();

  allocate(name: string, explicitId: string | undefined): string {
    if (explicitId === undefined) {
      const count = (this.counts.get(name) ?? 0) + 1;
      this.counts.set(name, count);
      return `${name}#${count}`;
    }
    if (this.explicit.has(explicitId)) {
      throw new DuplicateStepNameError(
        `step id ${JSON.stringify(explicitId)} is used twice in this run (step name ${JSON.stringify(name)}); ` +
          "explicit ids must be unique in a run",
      );
    }
    this.explicit.add(explicitId);
    return explicitId;
  }

  /** Whether the workflow has asked for the step `stepId` so far. */
  asked(stepId: string): boolean {
    const hash = stepId.lastIndexOf("#");
    const count = stepId.slice(hash + 1);
    if (hash >= 0 && /^\d+$/.test(count)) return (this.counts.get(stepId.slice(0, hash)) ?? 0) >= Number(count);
    return this.explicit.has(stepId);
  }
}

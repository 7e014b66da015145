/**
 * Values read by reference (protocol 1.5), kept for the next invocation of the same run.
 *
 * A reference names a value that never changes (a run's input; a step's result at a path of
 * its own writer), so a process that invokes a run again (a warm Lambda, a pull worker, a
 * long-lived server) need not read it again: each replay of a run with large results would
 * otherwise read every one of them again. Bounded by the size of what it holds; the least
 * recently used go first. It keeps each value's JSON text, so whoever gets a value gets a copy
 * of its own (the workflow may change what it is given).
 */

export const MAX_BYTES = 64 * 1024 * 1024;

/** (run ID, reference) → value, at most `maxBytes` of encoded values (UTF-16 code units, as a
 * JavaScript string holds them). */
export class PayloadCache {
  private readonly values = new Map<string, string>();
  private held = 0;

  constructor(readonly maxBytes: number = MAX_BYTES) {}

  /** The value kept for `ref` of the run, parsed anew; `found` is false when none is kept. */
  get(runId: string, ref: string): { found: boolean; value: unknown } {
    const key = keyOf(runId, ref);
    const text = this.values.get(key);
    if (text === undefined) return { found: false, value: undefined };
    this.values.delete(key); // most recently used: to the end of the order
    this.values.set(key, text);
    return { found: true, value: JSON.parse(text) };
  }

  put(runId: string, ref: string, value: unknown): void {
    const text = JSON.stringify(value ?? null);
    if (text.length > this.maxBytes) return;
    const key = keyOf(runId, ref);
    const old = this.values.get(key);
    if (old !== undefined) {
      this.values.delete(key);
      this.held -= old.length;
    }
    this.values.set(key, text);
    this.held += text.length;
    for (const [oldest, dropped] of this.values) {
      if (this.held <= this.maxBytes) break;
      this.values.delete(oldest);
      this.held -= dropped.length;
    }
  }

  /** How many values it keeps, and their size. */
  get size(): { values: number; bytes: number } {
    return { values: this.values.size, bytes: this.held };
  }

  clear(): void {
    this.values.clear();
    this.held = 0;
  }
}

function keyOf(runId: string, ref: string): string {
  return `${runId}\u0000${ref}`;
}

/** One per process: every invocation of a `PushApp` or a `Worker` in it shares it. */
export const CACHE = new PayloadCache();

/** What reads a value by reference (a `StateReader`). */
export interface PayloadReader {
  readPayload(ref: string): Promise<unknown>;
}

/** The value at `ref` of the run: from `CACHE` when this process read it before (a
 * reference's value never changes), else read with `reader` and kept. */
export async function readPayload(reader: PayloadReader, runId: string, ref: string): Promise<unknown> {
  const kept = CACHE.get(runId, ref);
  if (kept.found) return kept.value;
  const value = await reader.readPayload(ref);
  CACHE.put(runId, ref, value);
  return value;
}

/**
 * Canonical forms of protocol documents: the TypeScript twin of tests/golden/canon.py, so the
 * TypeScript SDK is held to the same recordings (tests/golden/exchanges) as the Python one.
 * Every UUID becomes `00000000-0000-4000-8000-<n>` (numbered by first appearance), every ISO
 * time `TIME`, a sleep step's `wakeAt` its distance from `startedAt`, tokens and invocation
 * IDs placeholders, the engine's loopback URL `ENGINE_URL`, a history cursor (1.5: sealed,
 * random) `<cursor-n>` numbered by first appearance, and a long string of one repeated
 * character (a large value) `<'x' * 70000>`; the last two are put back by `toReal`.
 */

export const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g;
const ISO_TIME = /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)/g;
const LOOPBACK_URL = /http:\/\/127\.0\.0\.1:\d+/g;
const TIME = "2026-01-01T00:00:00.000Z";
const ENGINE_URL = "http://127.0.0.1:1";
const SECRET_KEYS: Record<string, string> = { token: "<token>", invocationId: "<invocation>" };
const CURSOR = /^c1\.[A-Za-z0-9_-]+$/;
const CANONICAL_CURSOR = /^<cursor-\d+>$/;
const REPEATED = /^(.)\1{999,}$/su;
const CANONICAL_REPEATED = /^<'(.)' \* (\d+)>$/su;

function canonicalUuid(n: number): string {
  return `00000000-0000-4000-8000-${String(n).padStart(12, "0")}`;
}

export class Canon {
  readonly forward = new Map<string, string>();
  readonly backward = new Map<string, string>();
  private readonly cursors = new Map<string, string>();
  private readonly realCursors = new Map<string, string>();

  seed(real: string, canonical: string): void {
    this.forward.set(real, canonical);
    this.backward.set(canonical, real);
  }

  /** A canon that knows every ID in `document` as itself (they are canonical already). */
  static seeded(document: unknown): Canon {
    const canon = new Canon();
    for (const found of JSON.stringify(document).match(UUID) ?? []) canon.seed(found, found);
    return canon;
  }

  toCanonical(value: unknown): unknown {
    if (Array.isArray(value)) return value.map((item) => this.toCanonical(item));
    if (value && typeof value === "object") {
      const out: Record<string, unknown> = {};
      for (const [key, item] of Object.entries(sleepRelative(value as Record<string, unknown>))) {
        out[key] = key in SECRET_KEYS && typeof item === "string" ? SECRET_KEYS[key] : this.toCanonical(item);
      }
      return out;
    }
    if (typeof value === "string") {
      if (CURSOR.test(value)) return this.cursor(value);
      const repeated = REPEATED.exec(value);
      if (repeated) return `<'${repeated[1]}' * ${Array.from(value).length}>`;
      const text = value.replace(UUID, (real) => {
        if (!this.forward.has(real)) this.seed(real, canonicalUuid(this.forward.size + 1));
        return this.forward.get(real)!;
      });
      return text.replace(ISO_TIME, TIME).replace(LOOPBACK_URL, ENGINE_URL);
    }
    return value;
  }

  private cursor(real: string): string {
    if (!this.cursors.has(real)) {
      const canonical = `<cursor-${this.cursors.size + 1}>`;
      this.cursors.set(real, canonical);
      this.realCursors.set(canonical, real);
    }
    return this.cursors.get(real)!;
  }

  toReal(value: unknown): unknown {
    if (Array.isArray(value)) return value.map((item) => this.toReal(item));
    if (value && typeof value === "object") {
      return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, this.toReal(item)]));
    }
    if (typeof value === "string") {
      if (CANONICAL_CURSOR.test(value)) return this.realCursors.get(value) ?? value;
      const repeated = CANONICAL_REPEATED.exec(value);
      if (repeated) return repeated[1]!.repeat(Number(repeated[2]));
      return value.replace(UUID, (canonical) => {
        if (!this.backward.has(canonical)) this.seed(canonical, canonical); // an ID the recording made up
        return this.backward.get(canonical)!;
      });
    }
    return value;
  }
}

function sleepRelative(step: Record<string, unknown>): Record<string, unknown> {
  const { wakeAt, startedAt } = step;
  if (step.kind !== "sleep" || typeof wakeAt !== "string" || typeof startedAt !== "string") return step;
  const delta = (Date.parse(wakeAt) - Date.parse(startedAt)) / 1000;
  return Number.isNaN(delta) ? step : { ...step, wakeAt: `+${Math.round(delta)}s` };
}

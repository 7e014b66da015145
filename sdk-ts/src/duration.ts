/**
 * Sleep durations: `"3d"`, `"1h30m"`, `"90s"`, `"250ms"`, or a number of milliseconds (as
 * `setTimeout` and the other TypeScript SDKs of the field take it).
 */

export const MAX_SLEEP_SECONDS = 365 * 86_400;

/** A duration: a string such as `"3d"` or `"1h30m"`, or milliseconds. */
export type Duration = string | number;

const UNITS: Record<string, number> = { w: 604_800, d: 86_400, h: 3_600, m: 60, s: 1, ms: 0.001 };
const ORDER = Object.keys(UNITS);
const PART = /(\d+(?:\.\d+)?)(ms|w|d|h|m|s)/y;

/** Seconds for a finite, non-negative duration, however long (the caller checks the year,
 * so that a longer sleep fails its step instead of throwing in the workflow). */
export function durationSeconds(value: unknown): number {
  let seconds: number;
  if (typeof value === "number") seconds = value / 1000;
  else if (typeof value === "string") seconds = parseText(value);
  else {
    throw new TypeError(
      `invalid sleep duration ${String(value)}: use a string such as "3d" or "1h30m", or a number of milliseconds`,
    );
  }
  if (!Number.isFinite(seconds) || seconds < 0) {
    throw new RangeError(`invalid sleep duration ${JSON.stringify(value)}: must be a finite, positive duration`);
  }
  return seconds;
}

function parseText(textValue: string): number {
  if (!textValue) throw new RangeError("invalid sleep duration '': empty");
  let position = 0;
  let total = 0;
  let lastRank = -1;
  while (position < textValue.length) {
    PART.lastIndex = position;
    const match = PART.exec(textValue);
    const rank = match ? ORDER.indexOf(match[2]!) : -1;
    if (!match || rank <= lastRank) {
      throw new RangeError(
        `invalid sleep duration ${JSON.stringify(textValue)}: expected parts like "3d", "1h30m" or "90s" ` +
          "(units w, d, h, m, s, ms, largest first, each once, no spaces)",
      );
    }
    total += Number(match[1]) * UNITS[match[2]!]!;
    position = PART.lastIndex;
    lastRank = rank;
  }
  return total;
}

/**
 * The only module of the SDK that reads the time or makes randomness. Everything else calls
 * these through the module object (`clock.now()`), so a test can replace them.
 */

export const clock = {
  /** The current time. */
  now(): Date {
    return new Date();
  },
  /** Seconds since the epoch (request signatures). */
  unixSeconds(): number {
    return Date.now() / 1000;
  },
  /** Seconds from an arbitrary origin, for measuring durations only. */
  monotonic(): number {
    return performance.now() / 1000;
  },
  /** A random number in [0, 1) (the jitter of resend waits). */
  randomFraction(): number {
    return Math.random();
  },
  /** A random UUID (version 4). */
  newUuid(): string {
    return globalThis.crypto.randomUUID();
  },
  /** Wait `ms` milliseconds (retry backoff; never in workflow code). */
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        signal?.removeEventListener("abort", done);
        resolve();
      }
      signal?.addEventListener("abort", done, { once: true });
    });
  },
};

/** ISO 8601 in UTC with milliseconds and a `Z`: the protocol's time format. */
export function isoUtc(moment: Date): string {
  return moment.toISOString();
}

/** Protocol 1.5 on the SDK's side, one invocation at a time: a history in pages, values by
 * reference read when the workflow reaches them and kept for the run's next invocation, step
 * call answers with recorded outputs by reference, held ends kept out of a large answer, and
 * the HTTP transport's reads and resend rules. */

import assert from "node:assert/strict";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, beforeEach, describe, test } from "node:test";

import { clock } from "../src/clock.js";
import { EngineBusy } from "../src/errors.js";

import { workflow } from "../src/index.js";
import { CACHE, PayloadCache } from "../src/payloadCache.js";
import type { Op } from "../src/protocol/wire.js";
import { HttpStepTransport } from "../src/transport.js";
import { NotingTransport, ReadingTransport, fresh, invoke, recorded } from "./support.js";

const BIG = "b".repeat(300 * 1024);

const threeSteps = workflow("three", async ({ input, step }) => {
  const a = await step.run("a", () => "A");
  const b = await step.run("b", () => "B");
  await step.sleep("nap", "1h");
  const c = await step.run("c", () => "C");
  return { input, a: a.length, b: b.length, c };
});

beforeEach(() => CACHE.clear());

/** Answers as a fresh engine does, except that its `nth` call stays throttled past the SDK's
 * resends (the HTTP transport then raises `EngineBusy`). */
class ThrottledOnce extends NotingTransport {
  constructor(private readonly nth: number) {
    super();
  }

  override async send(ops: Op[]): Promise<ReturnType<typeof fresh>[]> {
    if (this.calls.length + 1 === this.nth) {
      this.calls.push(ops);
      throw new EngineBusy("step call stayed throttled: HTTP 503", 1);
    }
    return super.send(ops);
  }
}

describe("a throttled invocation", () => {
  test("answers `throttled` carrying the held step ends, so the engine records them", async () => {
    const pair = workflow("pair", async ({ step }) => {
      const a = await step.run("a", () => "A");
      return step.run("b", () => `${a}B`);
    });
    const { answer, transport } = await invoke(pair, {}, new ThrottledOnce(2));
    assert.equal(answer.outcome, "throttled");
    assert.equal(answer.retryAfter, 1);
    // a's end rode the throttled call (with b's start) and comes back in the answer.
    assert.deepEqual(transport.calls[1]!.map((op) => [op.op, op.stepId]), [["complete", "a#1"], ["start", "b#1"]]);
    assert.deepEqual(answer.ops, [{ op: "complete", stepId: "a#1", output: "A" }]);
  });
});

describe("a history in pages", () => {
  test("every page is read before the workflow runs; a step the request listed is as it says", async () => {
    const pages = {
      "c1.one": {
        steps: [
          recorded({ id: "a#1", kind: "run", status: "completed", output: "A" }),
          // Listed by the request as sleeping: the request's view wins (one moment's view).
          recorded({ id: "nap#1", kind: "sleep", status: "completed" }),
        ],
        nextCursor: "c1.two",
      },
      "c1.two": { steps: [recorded({ id: "b#1", kind: "run", status: "completed", output: "B" })], nextCursor: undefined },
    };
    const transport = new ReadingTransport(pages);
    const steps = [recorded({ id: "nap#1", kind: "sleep", status: "sleeping", wakeAt: "2026-01-01T01:00:00.000Z" })];
    const { answer } = await invoke(threeSteps, { steps, stepsCursor: "c1.one" }, transport);
    assert.equal(answer.outcome, "suspended", JSON.stringify(answer));
    assert.deepEqual(answer.waits, [{ stepId: "nap#1", name: "nap", kind: "sleep", seconds: 3600 }]);
    assert.deepEqual(transport.reads, ["history c1.one", "history c1.two"]);
    assert.deepEqual(transport.ops, [], "the pages' steps replay: nothing runs again");
  });

  test("a cancellation recorded on a page is not delivered again", async () => {
    const wf = workflow("cleanup", async ({ step }) => {
      try {
        await step.sleep("hold", "1d");
      } catch {
        await step.run("refund", () => "refunded");
      }
      await step.run("after", () => 1);
    });
    const pages = { "c1.p": { steps: [recorded({ id: "hold#1", kind: "sleep", status: "cancelled" })], nextCursor: undefined } };
    const transport = new ReadingTransport(pages);
    const { answer } = await invoke(wf, { status: "cancelling", stepsCursor: "c1.p" }, transport);
    assert.equal(answer.outcome, "cancelled");
    assert.deepEqual(
      transport.ops.filter((op) => op.op === "start").map((op) => op.stepId),
      ["refund#1", "after#1"],
      "the cleanup runs; no step is cancelled a second time",
    );
  });
});

describe("values by reference", () => {
  const refs = {
    input: { big: "i".repeat(70_000) },
    "steps/a%231/w1/output": "A".repeat(70_000),
    "steps/b%231/w2/output": "B".repeat(70_000),
  };
  const steps = [
    recorded({ id: "a#1", kind: "run", status: "completed", output: null, outputRef: "steps/a%231/w1/output" }),
    recorded({ id: "b#1", kind: "run", status: "completed", output: null, outputRef: "steps/b%231/w2/output" }),
    recorded({ id: "nap#1", kind: "sleep", status: "sleeping", wakeAt: "2026-01-01T01:00:00.000Z" }),
  ];

  test("the input is read first, each output when the workflow reaches its step", async () => {
    const transport = new ReadingTransport({}, refs);
    const { answer } = await invoke(threeSteps, { steps, inputRef: "input" }, transport);
    assert.equal(answer.outcome, "suspended");
    assert.deepEqual(transport.reads, ["payload input", "payload steps/a%231/w1/output", "payload steps/b%231/w2/output"]);
  });

  test("a step the workflow never reaches is never read", async () => {
    const early = workflow("three", async ({ step }) => {
      await step.run("a", () => "A");
      await step.sleep("nap", "1h");
    });
    const transport = new ReadingTransport({}, refs);
    await invoke(early, { steps: steps.slice(0, 1) }, transport);
    assert.deepEqual(transport.reads, ["payload steps/a%231/w1/output"]);
  });

  test("what this process read is kept for the run's next invocation, each value a copy of its own", async () => {
    const mutating = workflow("three", async ({ input, step }) => {
      (input as { big: string }).big = "changed";
      const a = await step.run("a", () => "A");
      await step.sleep("nap", "1h");
      return a;
    });
    const first = new ReadingTransport({}, refs);
    await invoke(mutating, { steps, inputRef: "input" }, first);
    assert.equal(first.reads.length, 2);
    const again = new ReadingTransport({}, refs);
    const { answer } = await invoke(threeSteps, { steps, inputRef: "input" }, again);
    assert.deepEqual(again.reads, ["payload steps/b%231/w2/output"], "only the value it lacked");
    assert.equal(answer.outcome, "suspended");
    const other = new ReadingTransport({}, refs);
    await invoke(threeSteps, { steps, inputRef: "input", runId: "run-2" }, other);
    assert.equal(other.reads.length, 3, "another run's values are its own");
    const fromCache = CACHE.get("run-1", "input");
    assert.deepEqual(fromCache, { found: true, value: refs.input }, "the workflow changed its copy, not the kept one");
  });

  test("the cache holds at most its bytes, least recently used out", () => {
    const cache = new PayloadCache(100);
    cache.put("r", "a", "x".repeat(40));
    cache.put("r", "b", "y".repeat(40));
    assert.equal(cache.get("r", "a").found, true); // a is now the most recently used
    cache.put("r", "c", "z".repeat(40));
    assert.deepEqual([cache.get("r", "a").found, cache.get("r", "b").found, cache.get("r", "c").found], [true, false, true]);
    cache.put("r", "huge", "h".repeat(200));
    assert.equal(cache.get("r", "huge").found, false, "a value larger than the whole cache is not kept");
    assert.ok(cache.size.bytes <= 100);
  });

  test("a request with references and a transport that cannot read them fails in the SDK, clearly", async () => {
    await assert.rejects(invoke(threeSteps, { steps }, new NotingTransport()), /references \(protocol 1\.5\)/);
  });
});

describe("step call answers with recorded outputs by reference", () => {
  test("a start answered `recorded` gives the recorded output, read by its reference", async () => {
    const transport = new ReadingTransport({}, { "steps/a%231/other/output": "theirs" }, (op: Op) =>
      op.op === "start" && op.stepId === "a#1"
        ? { stepId: "a#1", result: "recorded", step: { id: "a#1", name: "a", kind: "run", status: "completed", outputRef: "steps/a%231/other/output" } }
        : fresh(op),
    );
    const wf = workflow("taken", async ({ step }) => step.run("a", () => "mine"));
    const { answer } = await invoke(wf, {}, transport);
    assert.deepEqual(answer.output, "theirs");
    assert.deepEqual(transport.reads, ["payload steps/a%231/other/output"]);
  });

  for (const [what, theirs, outcome] of [
    ["the same output", "A", "completed"],
    ["another output", "Z", "aborted"],
  ] as const) {
    test(`a held end answered \`recorded\` by reference with ${what}: ${outcome}`, async () => {
      const ref = "steps/a%231/other/output";
      const transport = new ReadingTransport({}, { [ref]: theirs }, (op: Op) =>
        op.op === "complete" && op.stepId === "a#1"
          ? { stepId: "a#1", result: "recorded", step: { id: "a#1", name: "a", kind: "run", status: "completed", outputRef: ref } }
          : fresh(op),
      );
      const wf = workflow("held", async ({ step }) => {
        await step.run("a", () => "A");
        return step.run("b", () => "B");
      });
      const { answer } = await invoke(wf, {}, transport);
      assert.equal(answer.outcome, outcome, JSON.stringify(answer));
      assert.deepEqual(transport.reads, [`payload ${ref}`]);
    });
  }
});

describe("an answer carries small held ends only", () => {
  for (const [what, value, byCall] of [
    ["a small end rides the answer", "s", false],
    ["an end over 256 KiB is sent by a step call first", BIG, true],
  ] as const) {
    test(what, async () => {
      const wf = workflow("last", async ({ step }) => {
        await step.run("big", () => value);
        await step.sleep("nap", "1h");
      });
      const { answer, transport } = await invoke(wf);
      assert.equal(answer.outcome, "suspended");
      const sentEnds = transport.ops.filter((op) => op.op === "complete");
      assert.equal(sentEnds.length, byCall ? 1 : 0);
      assert.equal(((answer.ops as Op[] | undefined) ?? []).length, byCall ? 0 : 1);
    });
  }
});

describe("the HTTP transport", () => {
  test("says its protocol in a step call, reads pages and values with the token, resends on 5xx", async () => {
    const seen: Array<{ path: string; auth: string | undefined; body: any }> = [];
    let failures = 1;
    const server = createServer(async (req: IncomingMessage, res) => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      seen.push({ path: req.url ?? "", auth: req.headers.authorization, body });
      const answer = (status: number, payload: unknown) => res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(payload));
      if (req.url === "/v1/invocations/payload" && failures-- > 0) return answer(503, { error: { code: "unavailable", message: "again" } });
      if (req.url === "/v1/invocations/steps") return answer(200, { results: [{ stepId: "a#1", result: "started", attempt: 1 }] });
      if (req.url === "/v1/invocations/history") return answer(200, { steps: [{ id: "a#1", name: "a", kind: "run", status: "completed", outputRef: "r" }], nextCursor: null });
      if (body.ref === "missing") return answer(404, { error: { code: "not_found", message: "no such value" } });
      return answer(200, { value: { ok: true } });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
      const transport = new HttpStepTransport({ url, token: "tok" }, "dep", { backoffMs: [1] });
      await transport.send([{ op: "start", stepId: "a#1", name: "a", kind: "run", attempt: 1 }]);
      const page = await transport.readHistory("c1.x");
      assert.equal(page.steps[0]?.outputRef, "r");
      assert.equal(page.nextCursor, undefined);
      assert.deepEqual(await transport.readPayload("steps/a%231/w/output"), { ok: true });
      await assert.rejects(transport.readPayload("missing"), /payload read refused: 404 not_found/);
      assert.deepEqual(
        seen.map((s) => [s.path, s.auth]),
        [
          ["/v1/invocations/steps", "Bearer tok"],
          ["/v1/invocations/history", "Bearer tok"],
          ["/v1/invocations/payload", "Bearer tok"],
          ["/v1/invocations/payload", "Bearer tok"],
          ["/v1/invocations/payload", "Bearer tok"],
        ],
      );
      assert.deepEqual(seen[0]!.body, { deploymentId: "dep", ops: seen[0]!.body.ops, protocol: "1.5" });
      assert.deepEqual(seen[1]!.body, { cursor: "c1.x" });
      assert.deepEqual(seen[2]!.body, { ref: "steps/a%231/w/output" });
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe("the HTTP transport's resend rules (the Python SDK's)", () => {
  type Reply = [number, Record<string, string>?];
  let replies: Reply[] = [];
  let served = 0;
  let url = "";
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      served++;
      const [status, headers] = replies.shift() ?? [200];
      const body = status === 200 ? { results: [{ stepId: "a#1", result: "ok" }] } : { error: { code: "unavailable", message: "busy" } };
      res.writeHead(status, { "content-type": "application/json", ...(headers ?? {}) }).end(JSON.stringify(body));
    });
  });
  // The waits are taken on a fake clock instead of slept.
  const real = { sleep: clock.sleep, monotonic: clock.monotonic, randomFraction: clock.randomFraction };
  let slept: number[] = [];
  let now = 1000;

  before(async () => {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    clock.sleep = async (ms: number) => {
      slept.push(ms);
      now += ms / 1000;
    };
    clock.monotonic = () => now;
    clock.randomFraction = () => 1; // no jitter: the waits are the schedule's
  });
  after(async () => {
    Object.assign(clock, real);
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  beforeEach(() => {
    slept = [];
    served = 0;
  });

  const send = (retryForMs = 30_000) =>
    new HttpStepTransport({ url, token: "t" }, null, { backoffMs: [100, 400, 1200], retryForMs }).send([{ op: "record", stepId: "a#1" }]);

  test("a throttled call (429, 503) waits at least its Retry-After and goes through", async () => {
    replies = [[429, { "retry-after": "2" }], [503, { "retry-after": "1" }], [503]];
    assert.deepEqual(await send(), [{ stepId: "a#1", result: "ok" }]);
    assert.deepEqual(slept, [2000, 1000, 1200]);
  });

  test("a busy engine is tried past the schedule, waits doubling to 5 s, for the call's time", async () => {
    replies = Array.from({ length: 100 }, (): Reply => [503]);
    // Not the app's fault: `EngineBusy`, which the push app answers `throttled`.
    await assert.rejects(send(), (error: unknown) => error instanceof EngineBusy && /stayed throttled: HTTP 503/.test(error.message));
    assert.deepEqual(slept.slice(0, 6), [100, 400, 1200, 2400, 4800, 5000]);
    const waited = slept.reduce((sum, ms) => sum + ms, 0);
    assert.ok(waited < 30_000 && waited > 25_000, String(waited));
  });

  test("another 5xx is tried once per step of the schedule; a Retry-After past 20 s fails at once", async () => {
    replies = Array.from({ length: 10 }, (): Reply => [500]);
    await assert.rejects(send(), (error: unknown) => !(error instanceof EngineBusy) && /HTTP 500/.test(String(error)));
    assert.equal(served, 4);
    replies = [[429, { "retry-after": "21" }]];
    served = 0;
    await assert.rejects(send(), /HTTP 429/);
    assert.equal(served, 1);
    replies = [];
  });
});

/** The clients' resend rules (seed docs: 429 except quota_exceeded, 5xx and network errors,
 * after Retry-After, up to 3 times; any other 4xx at once) and `sendToQueue`'s `wfq_` keys,
 * against a loopback server that answers as told. */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";

import { clock } from "../src/clock.js";
import { ApiError, QueuesClient, WorkflowsClient, type SentMessage } from "../src/index.js";
import { QueueSendError, sendFn } from "../src/queueSteps.js";
import { durationSeconds } from "../src/duration.js";

type Reply = [number, unknown, Record<string, string>?];
const seen: Array<{ method: string; url: string; headers: IncomingHttpHeaders; body: string }> = [];
let replies: Reply[] = [];
let base = "";
const server = createServer((req, res) => {
  let body = "";
  req.on("data", (chunk) => (body += chunk));
  req.on("end", () => {
    seen.push({ method: req.method!, url: req.url!, headers: req.headers, body });
    const [status, answer, headers] = replies.shift() ?? [500, { error: { code: "internal_error", message: "no reply" } }];
    res.writeHead(status, { "content-type": "application/json", ...(headers ?? {}) });
    res.end(answer === undefined ? "" : JSON.stringify(answer));
  });
});

before(async () => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => new Promise<void>((resolve) => server.close(() => resolve())));

function queues(): QueuesClient {
  return new QueuesClient({ apiKey: "k", organizationId: "org", projectId: "proj", baseUrl: base });
}

const SENT = { messages: [{ messageId: "m1" }] };
const limited = (code: string): Reply => [429, { error: { code, message: "slow down" } }, { "retry-after": "0" }];

describe("resend rules", () => {
  test("429 rate_limited, 503 and 500 are sent again, with the same Idempotency-Key", async () => {
    seen.length = 0;
    replies = [limited("rate_limited"), [503, { error: { code: "unavailable", message: "" } }, { "retry-after": "0" }], [500, {}, { "retry-after": "0" }], [200, SENT]];
    assert.deepEqual(await queues().send("q1", [{ body: "x" }]), SENT);
    assert.equal(seen.length, 4);
    const keys = new Set(seen.map((s) => s.headers["idempotency-key"]));
    assert.equal(keys.size, 1);
    assert.equal(seen[0]!.url, "/v1/organizations/org/projects/proj/queues/q1/messages");
    assert.equal(seen[0]!.headers.authorization, "Bearer k");
  });

  test("up to 3 times: the fourth failure is thrown", async () => {
    seen.length = 0;
    replies = [limited("rate_limited"), limited("rate_limited"), limited("rate_limited"), limited("rate_limited")];
    await assert.rejects(queues().send("q1", [{ body: "x" }]), (e: ApiError) => e.status === 429 && e.code === "rate_limited");
    assert.equal(seen.length, 4);
  });

  test("429 quota_exceeded and other 4xx are thrown at once", async () => {
    for (const reply of [limited("quota_exceeded"), [404, { error: { code: "not_found", message: "no queue" } }] as Reply]) {
      seen.length = 0;
      replies = [reply, [200, SENT]];
      await assert.rejects(queues().send("q1", [{ body: "x" }]), ApiError);
      assert.equal(seen.length, 1);
    }
  });

  test("a network error is sent again", async () => {
    const closed = createServer((req) => req.socket.destroy());
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(closed.address() as AddressInfo).port}`;
    let hits = 0;
    closed.on("request", () => hits++);
    const client = new WorkflowsClient({ apiKey: "k", organizationId: "o", projectId: "p", baseUrl: url });
    const waits: number[] = [];
    const sleep = clock.sleep;
    clock.sleep = async (ms) => void waits.push(ms);
    try {
      await assert.rejects(client.getRun("r"));
    } finally {
      clock.sleep = sleep;
    }
    assert.equal(hits, 4);
    assert.deepEqual(waits, [500, 1000, 2000], "without a Retry-After: 0.5, 1 and 2 s");
    await new Promise((resolve) => closed.close(resolve));
  });

  test("settings fall back to the environment, and are required", () => {
    assert.throws(() => new WorkflowsClient({ apiKey: "k", organizationId: "o", projectId: "p", baseUrl: undefined }), /EZGH_API_URL/);
  });
});

describe("answers in pages", () => {
  const workflows = () => new WorkflowsClient({ apiKey: "k", organizationId: "org", projectId: "proj", baseUrl: base });

  test("getRun reads a run whose steps do not fit one answer page by page, and answers it whole", async () => {
    seen.length = 0;
    const step = (id: string) => ({ id, name: id, kind: "run", status: "completed", attempt: 1 });
    replies = [
      [200, { id: "r1", status: "completed", inputRef: "input", steps: [step("a#1")], nextStepsCursor: "s1" }],
      [200, { id: "r1", steps: [step("b#1")], nextStepsCursor: "s2" }],
      [200, { id: "r1", steps: [step("c#1")], nextStepsCursor: null }],
    ];
    const run = await workflows().getRun("r1");
    assert.deepEqual(run.steps.map((s) => s.id), ["a#1", "b#1", "c#1"]);
    assert.equal(run.inputRef, "input");
    assert.equal("nextStepsCursor" in run, false);
    assert.deepEqual(seen.map((s) => s.url), [
      "/v1/organizations/org/projects/proj/runs/r1",
      "/v1/organizations/org/projects/proj/runs/r1?stepsCursor=s1",
      "/v1/organizations/org/projects/proj/runs/r1?stepsCursor=s2",
    ]);
  });

  test("lists follow nextCursor to their end", async () => {
    seen.length = 0;
    replies = [
      [200, { apps: [{ id: "a" }], nextCursor: "n1" }],
      [200, { apps: [{ id: "b" }], nextCursor: null }],
    ];
    assert.deepEqual((await workflows().listApps()).apps, [{ id: "a" }, { id: "b" }]);
    assert.deepEqual(seen.map((s) => s.url), ["/v1/organizations/org/projects/proj/apps", "/v1/organizations/org/projects/proj/apps?cursor=n1"]);
  });
});

describe("sendToQueue's step function", () => {
  const step = { stepId: "notify#1", attempt: 2, idempotencyKey: createHash("sha256").update("run-1:notify#1").digest("hex") };

  test("sends wfq_<hex> and gives FIFO messages <hex>:<index> dedup IDs", async () => {
    seen.length = 0;
    replies = [[200, { messages: [{ messageId: "a", seq: "1" }, { messageId: "b", seq: "2" }, { messageId: "c" }] }]];
    const send = sendFn(queues(), "q1", [{ body: "1", groupId: "g" }, { body: "2", groupId: "g", dedupId: "own" }, { body: "3" }]);
    const sent: SentMessage[] = await send(step);
    assert.deepEqual(sent.map((m) => m.messageId), ["a", "b", "c"]);
    assert.equal(seen[0]!.headers["idempotency-key"], `wfq_${step.idempotencyKey}`);
    const messages = JSON.parse(seen[0]!.body).messages;
    assert.deepEqual(messages.map((m: { dedupId?: string }) => m.dedupId), [`${step.idempotencyKey}:0`, "own", undefined]);
  });

  test("a 4xx fails the step without retries", async () => {
    replies = [[403, { error: { code: "forbidden", message: "no" } }]];
    await assert.rejects(sendFn(queues(), "q1", [{ body: "x" }])(step), QueueSendError);
  });
});

describe("durations", () => {
  for (const [text, seconds] of [["3d", 259_200], ["1h30m", 5_400], ["90s", 90], ["250ms", 0.25], ["2w", 1_209_600], [1500, 1.5]] as const) {
    test(`${JSON.stringify(text)} is ${seconds} s`, () => assert.equal(durationSeconds(text), seconds));
  }
  for (const bad of ["", "3 d", "1m1h", "1h1h", "-1s", "3", Number.NaN, -5]) {
    test(`${JSON.stringify(bad)} is refused`, () => assert.throws(() => durationSeconds(bad)));
  }
});

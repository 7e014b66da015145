/**
 * The seed docs' TypeScript examples (test/examples) against a real `ezgh dev`, served each
 * way a TypeScript push app is (the Fetch handler, the Node handler, the Lambda handler behind
 * a function-URL adapter), and by a pull `Worker`: each way completes runs of every step kind
 * (run, sleep, value, callback, invoke with parallel steps, message, and a sendToQueue). Then
 * protocol 1.5's requests of bounded size (a run of eight 1 MiB results, behind a function
 * URL's 6 MB and through a pull worker) and `step.patched` with a run in flight across a
 * deploy. tests/ts/test_sdk_ts.py starts the engine and passes its environment; without it,
 * these tests are skipped (and that module fails on a skip).
 */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { PushApp, RunCancelledError, Worker, workflow, type Run } from "@ezgh/workflows";

import {
  HAS_ENGINE,
  advanceClock,
  createPullApp,
  messageSink,
  queuesClient,
  registerApp,
  serveFetch,
  serveLambda,
  serveNode,
  stepIs,
  waitFor,
  waitRun,
  waitRunSkippingSleeps,
  workflowsClient,
  type FunctionUrlStats,
  type Served,
} from "./harness.js";

const THREE_DAYS = 3 * 86_400 + 60;

async function examples() {
  return import("./examples/app.js");
}

/** Cancellation with cleanup: the pending sleep throws RunCancelledError, the cleanup step runs. */
const refundOnCancel = workflow("refund-on-cancel", async ({ step }) => {
  await step.run("charge", () => "charged");
  try {
    await step.sleep("hold", "1d");
  } catch (error) {
    if (error instanceof RunCancelledError) await step.run("refund", () => "refunded");
    throw error;
  }
});

type Serve = (app: PushApp, path: string) => Promise<Served>;

const WAYS: Array<[string, Serve, string]> = [
  ["fetch", serveFetch, "/api/workflows"],
  ["node", serveNode, "/"],
  ["lambda", serveLambda, "/lambda/ezgh"],
];

function completed(run: Run): void {
  assert.equal(run.status, "completed", JSON.stringify(run));
}

async function queuesFor(way: string, appId: string) {
  const queues = queuesClient();
  const tag = `${way}-${globalThis.crypto.randomUUID().slice(0, 8)}`; // a rerun on the same engine
  const payments = await queues.createQueue({ name: `payments-${tag}` });
  const orders = await queues.createQueue({ name: `orders-${tag}` });
  await queues.createSubscription({
    queueId: payments.id,
    target: { kind: "workflow", mode: "resume", appId, workflow: "order", correlationAttribute: "orderKey" },
  });
  const sink = await messageSink();
  await queues.createSubscription({ queueId: orders.id, target: { kind: "https", url: sink.url } });
  process.env.PAYMENTS_QUEUE_ID = payments.id;
  process.env.ORDERS_QUEUE_ID = orders.id;
  return { payments, orders, sink };
}

for (const [way, serve, path] of WAYS) {
  describe(`the seed docs' examples served by the ${way} handler`, { skip: !HAS_ENGINE && "no ezgh dev" }, () => {
    let served: Served;
    let appId: string;
    const closers: Array<() => Promise<void>> = [];

    before(async () => {
      const { workflows } = await examples();
      const app = new PushApp([...workflows, refundOnCancel]);
      served = await serve(app, path);
      closers.push(served.close);
      appId = (await registerApp(`ts-${way}`, served.url, app)).id;
    });

    after(async () => {
      for (const close of closers) await close();
    });

    test("every step kind completes", async () => {
      const client = workflowsClient();
      const { sink } = await queuesFor(way, appId);
      closers.push(sink.close);
      const start = (workflow: string, input: unknown) => client.startRun({ appId, workflow, input });
      const onboarding = await start("onboarding", { userId: `u-${way}` });
      const order = await start("order", { orderId: 1042 });
      const checkout = await start("checkout", { customerId: `c-${way}`, items: [{ price: 5 }, { price: 7 }] });
      const approval = await start("approval", { approver: `boss-${way}@example.invalid` });

      // The child workflow, with its parallel steps.
      const bought = await waitRun(checkout.id);
      completed(bought);
      assert.deepEqual(bought.output, { customer: `c-${way}@example.invalid`, amount: 12, chargeId: `ch_c-${way}_12` });
      assert.equal(bought.steps.find((s) => s.name === "charge")?.kind, "invoke");

      // The callback: POST its URL (no API key), and the run goes on with the body.
      const asking = await waitRun(approval.id, stepIs("ask", "completed"));
      const url = String((asking.steps.find((s) => s.name === "ask")?.output as { text: string }).text.split("POST to ")[1]);
      const posted = await fetch(url, { method: "POST", body: JSON.stringify({ approved: true }), headers: { "content-type": "application/json" } });
      assert.equal(posted.status, 200, await posted.text());
      const approved = await waitRun(approval.id);
      completed(approved);
      const out = approved.output as { requestId: string; askedAt: string; approved: boolean };
      assert.match(out.requestId, /^[0-9a-f-]{36}$/);
      assert.ok(!Number.isNaN(Date.parse(out.askedAt)));
      assert.equal(out.approved, true);
      assert.deepEqual(
        approved.steps.filter((s) => s.kind === "value").map((s) => s.output),
        [out.requestId, out.askedAt],
      );

      // The order: its notification reached the orders queue once, then its payment resumes it.
      await waitRun(order.id, stepIs("paid", "waiting"));
      const notified = await waitFor("the notify message", async () => sink.messages.length > 0 && sink.messages);
      assert.equal(notified.length, 1);
      assert.deepEqual(JSON.parse(notified[0]!.body), { id: "order-1042", amount: "19.99" });
      assert.deepEqual(notified[0]!.attributes, { orderId: "order-1042" });
      await queuesClient().send(process.env.PAYMENTS_QUEUE_ID!, [
        { body: JSON.stringify({ amount: "19.99" }), attributes: { orderKey: "order:1042" } },
      ]);
      const shipped = await waitRun(order.id);
      completed(shipped);
      assert.deepEqual(shipped.steps.find((s) => s.name === "ship")?.output, { shipped: 1042, payment: { amount: "19.99" } });
      assert.equal(shipped.steps.find((s) => s.name === "paid")?.kind, "message");

      // Onboarding sleeps three days: skip them.
      await waitRun(onboarding.id, stepIs("cooldown", "sleeping"));
      advanceClock(THREE_DAYS);
      const onboarded = await waitRun(onboarding.id);
      completed(onboarded);
      assert.deepEqual(
        onboarded.steps.map((s) => [s.name, s.kind, s.status]),
        [
          ["load-user", "run", "completed"],
          ["welcome-email", "run", "completed"],
          ["cooldown", "sleep", "completed"],
          ["follow-up", "run", "completed"],
        ],
      );
      const loaded = onboarded.steps[0]!.output as { createdAt: unknown };
      assert.equal(loaded.createdAt, "2026-01-01T00:00:00.000Z", "a Date passes through JSON as an ISO string");
    });

    test("a cancelled run cleans up and ends cancelled", async () => {
      const client = workflowsClient();
      const run = await client.startRun({ appId, workflow: "refund-on-cancel", input: {} });
      await waitRun(run.id, stepIs("hold", "sleeping"));
      await client.cancelRun(run.id);
      const ended = await waitRun(run.id);
      assert.equal(ended.status, "cancelled", JSON.stringify(ended));
      assert.deepEqual(
        ended.steps.map((s) => [s.name, s.status]),
        [
          ["charge", "completed"],
          ["hold", "cancelled"],
          ["refund", "completed"],
        ],
      );
    });
  });
}

/** Steps awaited together: each runs as a branch task of its own on a pull worker (the
 * engine queues it; the Worker runs its `branch` request like any task). */
const fanOut = workflow("fan-out", async ({ step, input }) => {
  const width = Number((input as { width: number }).width);
  const parts = await Promise.all(Array.from({ length: width }, (_, i) => step.run(`part-${i}`, () => i * i)));
  return parts.reduce((sum, part) => sum + part, 0);
});

describe("a pull Worker", { skip: !HAS_ENGINE && "no ezgh dev" }, () => {
  test("runs parallel steps (Promise.all of 3 and of 20) as branch tasks", async () => {
    const client = workflowsClient();
    const app = await createPullApp("ts-worker-fan");
    const worker = new Worker({ appId: app.id, workflows: [fanOut], concurrency: 8, pollWaitSeconds: 1 });
    const running = worker.run();
    try {
      await waitFor("the worker's announce", async () => (await client.getApp(app.id)).status === "synced");
      for (const width of [3, 20]) {
        const run = await client.startRun({ appId: app.id, workflow: "fan-out", input: { width } });
        const done = await waitRun(run.id);
        completed(done);
        assert.equal(done.output, Array.from({ length: width }, (_, i) => i * i).reduce((a, b) => a + b, 0));
        const parts = done.steps.filter((s) => s.name.startsWith("part-"));
        assert.equal(parts.length, width);
        assert.ok(parts.every((s) => s.status === "completed" && s.attempt === 1), JSON.stringify(parts));
      }
    } finally {
      worker.stop();
      await running;
    }
  });

  for (const directQueue of [true, false]) {
    test(`completes runs (${directQueue ? "on its queue directly" : "through tasks/poll"})`, async () => {
      const { workflows } = await examples();
      const client = workflowsClient();
      const app = await createPullApp(`ts-worker-${directQueue ? "queue" : "api"}`);
      const worker = new Worker({ appId: app.id, workflows, concurrency: 2, pollWaitSeconds: 1, directQueue });
      const running = worker.run();
      try {
        await waitFor("the worker's announce", async () => (await client.getApp(app.id)).status === "synced");
        const onboarding = await client.startRun({ appId: app.id, workflow: "onboarding", input: { userId: "u-worker" } });
        const charged = await client.startRun({ appId: app.id, workflow: "charge", input: { customerId: "c-worker", amount: 3 } });
        completed(await waitRun(charged.id));
        const approval = await client.startRun({ appId: app.id, workflow: "approval", input: { approver: "boss@example.invalid" } });
        const asking = await waitRun(approval.id, stepIs("ask", "completed"));
        const url = String((asking.steps.find((s) => s.name === "ask")?.output as { text: string }).text.split("POST to ")[1]);
        assert.equal((await fetch(url, { method: "POST", body: JSON.stringify({ approved: true }) })).status, 200);
        completed(await waitRun(approval.id));
        await waitRun(onboarding.id, stepIs("cooldown", "sleeping"));
        advanceClock(THREE_DAYS);
        const done = await waitRun(onboarding.id);
        completed(done);
        assert.deepEqual((done.output as { to: string }).to, "u-worker@example.invalid");
        assert.equal(worker.polling, directQueue ? "queue" : "api");
      } finally {
        worker.stop();
        await running;
      }
    });
  }
});

const CHUNK = 1024 * 1024 - 2; // a string of 1 MiB encoded: the largest step result the docs allow

/** Eight results of 1 MiB, then a sleep: the invocation after it replays 8 MiB of results,
 * which a 1.4 request carries inline (an 8 MB request a function URL refuses, a task no SQS
 * message holds); in 1.5 they are references, read by the SDK. */
const eightMib = workflow("eight-mib", async ({ step }) => {
  const values: string[] = [];
  for (let i = 0; i < 8; i++) values.push(await step.run(`chunk-${i}`, () => String.fromCharCode(97 + i).repeat(CHUNK)));
  await step.sleep("pause", "1d");
  return values.map((value) => [value[0], value.length]);
});
const EIGHT_MIB = Array.from({ length: 8 }, (_, i) => [String.fromCharCode(97 + i), CHUNK]);

/** Notes the values this process reads by reference (the SDK's payload calls, seen at
 * `fetch`), until `restore()`. */
function notingReads(): { refs: string[]; restore(): void } {
  const refs: string[] = [];
  const original = globalThis.fetch;
  globalThis.fetch = (input: string | URL | Request, init?: RequestInit) => {
    const url = input instanceof Request ? input.url : String(input);
    if (url.endsWith("/v1/invocations/payload") && typeof init?.body === "string") refs.push(JSON.parse(init.body).ref);
    return original(input, init);
  };
  return { refs, restore: () => void (globalThis.fetch = original) };
}

function readOnceEach(refs: string[]): void {
  assert.equal(refs.length, 8, `each of the eight results read once (this process keeps them): ${refs}`);
  assert.equal(new Set(refs).size, 8);
  assert.ok(refs.every((ref) => /^steps\/chunk-\d%231\//.test(ref)), String(refs));
}

describe("protocol 1.5: a run of eight results of 1 MiB", { skip: !HAS_ENGINE && "no ezgh dev" }, () => {
  test("completes through a push app behind a function URL's 6 MB", async () => {
    const { refs, restore } = notingReads();
    const app = new PushApp([eightMib]);
    const stats: FunctionUrlStats = { largest: 0, refused: 0 };
    const served = await serveLambda(app, "/lambda/big", stats);
    try {
      const { id } = await registerApp("ts-eight-mib", served.url, app);
      const run = await workflowsClient().startRun({ appId: id, workflow: "eight-mib", input: {} });
      const done = await waitRunSkippingSleeps(run.id);
      completed(done);
      assert.deepEqual(done.output, EIGHT_MIB);
      assert.equal(stats.refused, 0);
      assert.ok(stats.largest < 800 * 1024, `the largest request: ${stats.largest} bytes`);
      readOnceEach(refs);
    } finally {
      restore();
      await served.close();
    }
  });

  test("completes through a pull Worker", async () => {
    const client = workflowsClient();
    const app = await createPullApp("ts-worker-eight-mib");
    const { refs, restore } = notingReads();
    const worker = new Worker({ appId: app.id, workflows: [eightMib], pollWaitSeconds: 1 });
    const running = worker.run();
    try {
      await waitFor("the worker's announce", async () => (await client.getApp(app.id)).status === "synced");
      const run = await client.startRun({ appId: app.id, workflow: "eight-mib", input: {} });
      const done = await waitRunSkippingSleeps(run.id);
      completed(done);
      assert.deepEqual(done.output, EIGHT_MIB);
      readOnceEach(refs);
    } finally {
      restore();
      worker.stop();
      await running;
    }
  });
});

/** A deploy that changes a loop under runs in flight, with `step.patched` (docs/deploy.md):
 * the old code counted its invites, the new one gives each an explicit ID. */
const invitesV1 = workflow("invites", async ({ input, step }) => {
  for (const r of (input as { recipients: string[] }).recipients) await step.run("invite", () => `sent ${r}`);
  await step.sleep("cooldown", "3d");
  return "old code";
});

const invitesV2 = workflow("invites", async ({ input, step }) => {
  const recipients = (input as { recipients: string[] }).recipients;
  const patched = await step.patched("invite-ids");
  for (const r of recipients) {
    if (patched) await step.run("invite", () => `sent ${r}`, { id: `invite-${r}` });
    else await step.run("invite", () => `sent ${r}`);
  }
  await step.sleep("cooldown", "3d");
  return patched ? "new path" : "old path";
});

describe("step.patched across a deploy", { skip: !HAS_ENGINE && "no ezgh dev" }, () => {
  test("a run in flight keeps the old path, a new run takes the new one", async () => {
    const old = new PushApp([invitesV1]);
    const patched = new PushApp([invitesV2]);
    let deployed = old;
    // One URL and one signing key, whichever code is deployed behind it.
    const front = {
      fetch: (request: Request) => deployed.fetch(request),
      set signingKey(key: string) {
        old.signingKey = patched.signingKey = key;
      },
    } as unknown as PushApp;
    const served = await serveFetch(front, "/invites");
    try {
      const { id: appId } = await registerApp("ts-invites", served.url, front);
      const client = workflowsClient();
      const input = { recipients: ["ana", "bo"] };
      const inFlight = await client.startRun({ appId, workflow: "invites", input });
      await waitRun(inFlight.id, stepIs("cooldown", "sleeping"));
      deployed = patched;
      const fresh = await client.startRun({ appId, workflow: "invites", input });
      await waitRun(fresh.id, stepIs("cooldown", "sleeping"));
      advanceClock(THREE_DAYS);
      const kept = await waitRun(inFlight.id);
      const moved = await waitRun(fresh.id);
      completed(kept);
      completed(moved);
      assert.equal(kept.output, "old path");
      assert.equal(moved.output, "new path");
      const marker = (run: Run) => run.steps.find((step) => step.id === "patched:invite-ids");
      assert.deepEqual([marker(kept)?.kind, marker(kept)?.output], ["value", false]);
      assert.deepEqual([marker(moved)?.kind, marker(moved)?.output], ["value", true]);
      assert.deepEqual(kept.steps.map((step) => step.id), ["invite#1", "invite#2", "cooldown#1", "patched:invite-ids"]);
      assert.deepEqual(moved.steps.map((step) => step.id), ["patched:invite-ids", "invite-ana", "invite-bo", "cooldown#1"]);
    } finally {
      await served.close();
    }
  });
});

/** `step.patched(id)`: a recorded `value` step named `patched:<id>`, true for a run that
 * reaches the point for the first time, false for one that went past it on the old code, with
 * the Python SDK's marker convention (the op below is the one it sends), so the replay gate and
 * the Python test kit read a TypeScript run's markers as their own. */

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { workflow } from "../src/index.js";
import { invoke, recorded } from "./support.js";

/** The docs' pattern (docs/deploy.md): new runs give each invite an explicit ID, runs that went
 * past this point on the old code keep the old counted loop. */
const invites = workflow("invites", async ({ input, step }) => {
  const recipients = (input as { recipients: string[] }).recipients;
  const path = await step.patched("invite-ids");
  for (const r of recipients) {
    if (path) await step.run("invite", () => `sent ${r}`, { id: `invite-${r}` });
    else await step.run("invite", () => `sent ${r}`);
  }
  await step.sleep("cooldown", "3d");
  return path;
});

const input = { recipients: ["ana", "bo"] };

function starts(ops: Array<Record<string, unknown>>): unknown[] {
  return ops.filter((op) => op.op === "start").map((op) => op.stepId);
}

describe("step.patched", () => {
  test("a run reaching the point for the first time takes the new path, and records true", async () => {
    const { answer, transport } = await invoke(invites, { input });
    assert.equal(answer.outcome, "suspended");
    assert.deepEqual(transport.calls[0], [
      { op: "record", stepId: "patched:invite-ids", name: "patched:invite-ids", kind: "value", output: true },
    ]);
    assert.deepEqual(starts(transport.ops), ["invite-ana", "invite-bo"]);
  });

  test("a run that went past it on the old code takes the old path, and records false", async () => {
    const steps = [
      recorded({ id: "invite#1", kind: "run", status: "completed", output: "sent ana" }),
      recorded({ id: "invite#2", kind: "run", status: "completed", output: "sent bo" }),
      recorded({ id: "cooldown#1", kind: "sleep", status: "completed" }),
    ];
    const { answer, transport } = await invoke(invites, { input, steps });
    assert.deepEqual(answer.output, false);
    assert.deepEqual(transport.ops, [
      { op: "record", stepId: "patched:invite-ids", name: "patched:invite-ids", kind: "value", output: false },
    ]);
  });

  for (const value of [true, false]) {
    test(`a recorded marker (${value}) replays without a call`, async () => {
      const steps = [recorded({ id: "patched:invite-ids", name: "patched:invite-ids", kind: "value", status: "completed", output: value })];
      const { answer, transport } = await invoke(invites, { input, steps });
      assert.equal(answer.outcome, "suspended");
      assert.equal(transport.ops.some((op) => op.op === "record"), false);
      assert.deepEqual(starts(transport.ops), value ? ["invite-ana", "invite-bo"] : ["invite#1", "invite#2"]);
    });
  }

  test("a record that ends before the point, or holds only other markers, is not past it", async () => {
    const later = workflow("later", async ({ step }) => {
      await step.run("first", () => 1);
      const a = await step.patched("a");
      const b = await step.patched("b");
      return [a, b];
    });
    const steps = [
      recorded({ id: "first#1", kind: "run", status: "completed", output: 1 }),
      recorded({ id: "patched:a", name: "patched:a", kind: "value", status: "completed", output: true }),
    ];
    const { answer, transport } = await invoke(later, { steps });
    assert.deepEqual(answer.output, [true, true]);
    assert.deepEqual(transport.ops.map((op) => op.stepId), ["patched:b"]);
  });

  test("the same ID twice in a run answers the same, recorded once", async () => {
    const twice = workflow("twice", async ({ step }) => [await step.patched("x"), await step.patched("x")]);
    const { answer, transport } = await invoke(twice);
    assert.deepEqual(answer.output, [true, true]);
    assert.equal(transport.ops.length, 1);
  });

  test("an ID that is no step ID is refused at the call", async () => {
    const bad = workflow("bad", async ({ step }) => {
      for (const id of ["", "has space", "x".repeat(121), 7 as unknown as string]) assert.throws(() => step.patched(id), RangeError);
      await step.patched("x".repeat(120)); // the longest: patched: + 120 = 128
      return "ok";
    });
    const { answer } = await invoke(bad);
    assert.equal(answer.output, "ok");
  });

  test("a marker recorded with another value fails closed (workflows.nondeterminism)", async () => {
    const steps = [recorded({ id: "patched:invite-ids", name: "patched:invite-ids", kind: "value", status: "completed", output: "yes" })];
    const { answer } = await invoke(invites, { input, steps });
    assert.equal(answer.outcome, "failed");
    assert.equal((answer.error as { code: string }).code, "workflows.nondeterminism");
  });
});

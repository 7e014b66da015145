/**
 * `Worker`: runs a pull app's workflows by long-polling its task queue.
 *
 * A task is the invoke request a push app would get plus `taskId` and `leaseSeconds`. The
 * worker runs it with the same driver as `PushApp`, extends the task's lease while it runs
 * (`POST /v1/invocations/heartbeat`) and posts the outcome (`POST /v1/invocations/outcome`),
 * both with the invocation's token. A worker that dies stops heartbeating: when the lease ends
 * the engine hands the task to another worker, and the dead worker's late step calls are
 * refused. A parallel step's task (a branch task: its request carries `branch`) is run,
 * heartbeated and answered the same way; the engine holds it by the step's own lease.
 *
 * Waiting for tasks: by default the worker asks for credentials to its app's task queue
 * (`tasks/access`) and long-polls the queue itself (one SQS request per 20 s while idle); a task
 * received so is claimed with a first heartbeat. An engine that vends none (404, 405, 409,
 * 501) is polled through `tasks/poll`.
 */

import { ApiClient, ApiError, segment, type ClientOptions } from "./api.js";
import { clock } from "./clock.js";
import { detectDeploymentId } from "./deployment.js";
import { Invocation } from "./driver.js";
import { UnknownWorkflowError } from "./errors.js";
import { PROTOCOL_VERSION, ProtocolError, answers, parseInvoke, type Answer } from "./protocol/wire.js";
import { QueueAccess, QueueError, TaskQueue } from "./taskQueue.js";
import { httpTransportFactory, type TransportFactory } from "./transport.js";
import { indexWorkflows, type Workflow } from "./workflow.js";

const OUTCOME_PATH = "/v1/invocations/outcome";
const HEARTBEAT_PATH = "/v1/invocations/heartbeat";
const MAX_POLL_SECONDS = 20;
/** Answers of `tasks/access` that mean "this engine vends no queue credentials". */
const NO_DIRECT_ACCESS = new Set([404, 405, 409, 501]);

export interface WorkerOptions extends ClientOptions {
  /** The pull app's ID (UUID) or slug. */
  appId: string;
  workflows: Iterable<Workflow<any, any>>;
  /** Tasks run at once (default 4). */
  concurrency?: number;
  workerId?: string;
  /** How long one poll waits for a task (0 to 20 s, default 20). */
  pollWaitSeconds?: number;
  /** Long-poll the app's queue directly where the engine vends credentials (default true). */
  directQueue?: boolean;
  /** This deployment's ID (else detected, or `EZGH_DEPLOYMENT_ID`). */
  deploymentId?: string;
  transportFactory?: TransportFactory;
}

type Task = Record<string, any>;

/** Polls a pull app and runs its tasks, `concurrency` at a time. Several workers, in one
 * process or many, share an app's tasks. */
export class Worker {
  readonly appId: string;
  readonly workerId: string;
  readonly concurrency: number;
  /** The app, as announcing answered it. */
  app: Record<string, unknown> = {};
  private directQueue: boolean;
  private readonly index: Map<string, Workflow<any, any>>;
  private readonly api: ApiClient;
  private readonly pollWaitSeconds: number;
  private readonly deploymentId: string | undefined;
  private readonly transportFactory: TransportFactory;
  private readonly stopping = new AbortController();
  private readonly running = new Set<Promise<void>>();
  private queue: TaskQueue | undefined;
  private slotFreed: (() => void) | undefined;

  constructor(options: WorkerOptions) {
    const concurrency = options.concurrency ?? 4;
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new RangeError("concurrency must be at least 1");
    this.appId = options.appId;
    this.index = indexWorkflows(options.workflows);
    this.pollWaitSeconds = Math.max(0, Math.min(Math.trunc(options.pollWaitSeconds ?? MAX_POLL_SECONDS), MAX_POLL_SECONDS));
    this.api = new ApiClient({ ...options, timeoutSeconds: options.timeoutSeconds ?? 30 });
    this.workerId = options.workerId ?? `ts-${clock.newUuid()}`;
    this.concurrency = concurrency;
    this.directQueue = options.directQueue ?? true;
    this.deploymentId = options.deploymentId;
    this.transportFactory = options.transportFactory ?? httpTransportFactory;
  }

  get workflows(): Workflow<any, any>[] {
    return [...this.index.values()];
  }

  /** How this worker waits for tasks: on its app's queue directly, or through `tasks/poll`. */
  get polling(): "queue" | "api" {
    return this.directQueue ? "queue" : "api";
  }

  /** Stop polling; `run()` resolves once the tasks in progress have ended. */
  stop(): void {
    this.stopping.abort();
    this.slotFreed?.();
  }

  /** Announce this worker, then poll and run tasks until `stop()` (or SIGTERM). */
  async run(): Promise<void> {
    const proc = (globalThis as { process?: NodeJS.Process }).process;
    const onSignal = () => this.stop();
    proc?.once?.("SIGTERM", onSignal);
    try {
      await this.announce();
      while (!this.stopping.signal.aborted) {
        if (this.running.size >= this.concurrency) {
          await new Promise<void>((resolve) => (this.slotFreed = resolve));
          continue;
        }
        let task: Task | undefined;
        try {
          task = await this.poll();
        } catch (error) {
          if (this.stopping.signal.aborted) break;
          console.warn(`ezgh: worker ${this.workerId}: poll failed: ${(error as Error)?.message ?? error}`);
          await clock.sleep(1000, this.stopping.signal);
          continue;
        }
        if (task) this.start(task);
      }
      await Promise.all([...this.running]);
    } finally {
      proc?.removeListener?.("SIGTERM", onSignal);
    }
  }

  private async announce(): Promise<void> {
    // `protocol`: tasks come in the newest version both sides speak (1.5: references).
    const body = { workerId: this.workerId, workflows: [...this.index.keys()], protocol: PROTOCOL_VERSION };
    let delay = 500;
    while (!this.stopping.signal.aborted) {
      try {
        this.app = await this.api.request("POST", `/apps/${segment(this.appId)}/workers`, { json: body, resends: 0 });
        return;
      } catch (error) {
        if (error instanceof ApiError && error.status < 500 && error.status !== 429) throw error;
        console.warn(`ezgh: worker ${this.workerId}: announce failed: ${(error as Error)?.message ?? error}`);
      }
      await clock.sleep(delay, this.stopping.signal);
      delay = Math.min(delay * 2, 10_000);
    }
  }

  private async poll(): Promise<Task | undefined> {
    if (this.directQueue) {
      const queue = await this.taskQueue();
      if (queue) return this.receive(queue);
    }
    const answer = await this.api.request("POST", `/apps/${segment(this.appId)}/tasks/poll`, {
      json: { waitSeconds: this.pollWaitSeconds, workerId: this.workerId },
      resends: 0,
      timeoutSeconds: this.pollWaitSeconds + 30,
      signal: this.stopping.signal,
    });
    return answer && typeof answer === "object" && answer.taskId ? (answer as Task) : undefined;
  }

  /** The app's queue with fresh credentials; undefined once the engine vends none. */
  private async taskQueue(): Promise<TaskQueue | undefined> {
    if (this.queue?.access.fresh) return this.queue;
    try {
      const answer = await this.api.request("POST", `/apps/${segment(this.appId)}/tasks/access`, { resends: 0 });
      this.queue = new TaskQueue(QueueAccess.fromAnswer(answer));
      return this.queue;
    } catch (error) {
      if (!(error instanceof ApiError) || !NO_DIRECT_ACCESS.has(error.status)) throw error;
      console.info(`ezgh: worker ${this.workerId}: no direct queue access (${error.status} ${error.code}); polling the API`);
      this.directQueue = false;
      return undefined;
    }
  }

  /** One task from the queue, deleted and claimed; undefined when none came or it was stale.
   * The lease, not the message, is the truth: a task lost between delete and claim is
   * delivered again when its lease ends. */
  private async receive(queue: TaskQueue): Promise<Task | undefined> {
    let got: [string, string] | undefined;
    try {
      got = await queue.receive(this.pollWaitSeconds, this.stopping.signal);
      if (!got) return undefined;
      await queue.delete(got[1]);
    } catch (error) {
      if (error instanceof QueueError) this.queue = undefined; // expired or revoked: ask again
      throw error;
    }
    let task: unknown;
    try {
      task = JSON.parse(got[0]);
    } catch {
      console.warn(`ezgh: worker ${this.workerId}: dropping a malformed task`);
      return undefined;
    }
    if (!task || typeof task !== "object" || !(task as Task).taskId) return undefined;
    return (await this.claim(task as Task)) ? (task as Task) : undefined;
  }

  /** A first heartbeat: 200 while the task's invocation holds a live lease and no other
   * receipt of the task claimed it (SQS may deliver a task twice). */
  private async claim(task: Task): Promise<boolean> {
    const body = { taskId: task.taskId, claim: clock.newUuid() };
    for (const delay of [200, 1000, undefined]) {
      let status = 0;
      try {
        status = await this.post(task, HEARTBEAT_PATH, body);
      } catch (error) {
        console.warn(`ezgh: worker ${this.workerId}: claiming a task failed: ${(error as Error)?.message ?? error}`);
      }
      if (status === 200) return true;
      if (status >= 400 && status < 500 && status !== 429) return false; // someone else has it
      if (delay === undefined) return false; // its lease ends unrenewed: delivered again
      await clock.sleep(delay);
    }
    return false;
  }

  private async post(task: Task, path: string, body: unknown): Promise<number> {
    const api = task.api ?? {};
    const answer = await fetch(String(api.url ?? "").replace(/\/+$/, "") + path, {
      method: "POST",
      body: JSON.stringify(body),
      headers: { authorization: `Bearer ${api.token ?? ""}`, "content-type": "application/json" },
      signal: AbortSignal.timeout(30_000),
    });
    await answer.arrayBuffer();
    return answer.status;
  }

  private start(task: Task): void {
    const running: Promise<void> = this.handle(task).finally(() => {
      this.running.delete(running);
      this.slotFreed?.();
    });
    this.running.add(running);
  }

  private async handle(task: Task): Promise<void> {
    const beat = this.heartbeat(task);
    try {
      const outcome = await this.execute(task);
      if (outcome) await this.postOutcome(task, outcome);
    } catch (error) {
      console.error(`ezgh: worker ${this.workerId}: task failed in the SDK`, error);
    } finally {
      beat.stop();
    }
  }

  /** The outcome of the task, by the same driver `PushApp` uses; undefined when the SDK could
   * not run it (the engine delivers it again when the lease ends). */
  private async execute(task: Task): Promise<Answer | undefined> {
    const deploymentId = this.deploymentId ?? detectDeploymentId();
    let request;
    try {
      request = parseInvoke(task);
    } catch (error) {
      if (!(error instanceof ProtocolError)) throw error;
      console.error(`ezgh: worker ${this.workerId}: malformed task: ${error.message}`);
      return undefined;
    }
    const workflow = this.index.get(request.run.workflow);
    if (!workflow) {
      const error = new UnknownWorkflowError(`this worker has no workflow ${JSON.stringify(request.run.workflow)}`);
      return answers.failed(error.toBody(), deploymentId);
    }
    try {
      const transport = this.transportFactory(request.api, deploymentId);
      return await new Invocation(workflow, request, transport, deploymentId).execute();
    } catch (error) {
      console.error(`ezgh: invocation of run ${request.run.id} failed in the SDK`, error);
      return undefined;
    }
  }

  private async postOutcome(task: Task, outcome: Answer): Promise<void> {
    const body = { ...outcome, taskId: task.taskId };
    for (const delay of [200, 1000, 3000, undefined]) {
      let status = 0;
      let problem = "";
      try {
        status = await this.post(task, OUTCOME_PATH, body);
        problem = `HTTP ${status}`;
      } catch (error) {
        problem = String((error as Error)?.message ?? error);
      }
      if (status === 200) return;
      if (status >= 400 && status < 500 && status !== 429) {
        // 409: the lease was lost (another worker has the task); 401: the token expired.
        console.warn(`ezgh: worker ${this.workerId}: outcome refused (${problem})`);
        return;
      }
      if (delay === undefined) {
        console.error(`ezgh: worker ${this.workerId}: could not post the outcome: ${problem}`);
        return;
      }
      await clock.sleep(delay);
    }
  }

  /** Extend the task's lease every third of it until stopped (or the lease is lost). */
  private heartbeat(task: Task): { stop(): void } {
    const lease = Number(task.leaseSeconds) || 60;
    let lost = false;
    const timer = setInterval(() => {
      if (lost) return;
      this.post(task, HEARTBEAT_PATH, { taskId: task.taskId }).then(
        (status) => {
          if (status === 409 || status === 401) lost = true; // the step calls will be refused
        },
        (error) => console.warn(`ezgh: worker ${this.workerId}: heartbeat failed: ${(error as Error)?.message ?? error}`),
      );
    }, Math.max(200, (lease / 3) * 1000));
    return { stop: () => clearInterval(timer) };
  }
}

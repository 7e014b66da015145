/** Which deployment is running this code: `EZGH_DEPLOYMENT_ID`, or the platform's own IDs. */

type Env = Record<string, string | undefined>;

const DETECTORS: Array<(env: Env) => string | undefined> = [
  // Vercel
  (env) => env.VERCEL_DEPLOYMENT_ID || undefined,
  // AWS Lambda: name:version
  (env) =>
    env.AWS_LAMBDA_FUNCTION_NAME && env.AWS_LAMBDA_FUNCTION_VERSION
      ? `${env.AWS_LAMBDA_FUNCTION_NAME}:${env.AWS_LAMBDA_FUNCTION_VERSION}`
      : undefined,
  // Cloud Run: service:revision
  (env) => (env.K_SERVICE && env.K_REVISION ? `${env.K_SERVICE}:${env.K_REVISION}` : undefined),
  // Fly.io: app:machine version (or image ref)
  (env) => {
    const version = env.FLY_MACHINE_VERSION || env.FLY_IMAGE_REF;
    return env.FLY_APP_NAME && version ? `${env.FLY_APP_NAME}:${version}` : undefined;
  },
  // Render: service:commit, or the deploy ID
  (env) =>
    env.RENDER_SERVICE_ID && env.RENDER_GIT_COMMIT
      ? `${env.RENDER_SERVICE_ID}:${env.RENDER_GIT_COMMIT}`
      : env.RENDER_DEPLOY_ID || undefined,
];

function processEnv(): Env {
  const proc = (globalThis as { process?: { env?: Env } }).process;
  return proc?.env ?? {};
}

/** `EZGH_DEPLOYMENT_ID` if set, else the first platform ID found (Vercel, AWS Lambda, Cloud
 * Run, Fly.io, Render), else `null`. */
export function detectDeploymentId(env: Env = processEnv()): string | null {
  if (env.EZGH_DEPLOYMENT_ID) return env.EZGH_DEPLOYMENT_ID;
  for (const detect of DETECTORS) {
    const found = detect(env);
    if (found) return found;
  }
  return null;
}

/**
 * JSON value rules (seed docs "Values are JSON", protocol section 4), for TypeScript.
 *
 * A value passes through JSON before the workflow sees it, so the first run and every replay
 * see the same value: a `Date` (anything with `toJSON`) becomes its JSON form (an ISO string),
 * `undefined` becomes `null` (as a value, or in an array; an object property holding it is
 * left out, as `JSON.stringify` does). A function, symbol or bigint anywhere, a number that is
 * not finite, an invalid `Date`, a string with a lone UTF-16 surrogate, a `Map`, `Set`,
 * typed array or other value `JSON.stringify` would silently lose, or nesting past 64 levels
 * (or a cycle), throws `InvalidValueError`; an encoding over 1 MiB throws `OutputTooLargeError`.
 */

import { InvalidValueError, OutputTooLargeError } from "./errors.js";

export const MAX_VALUE_BYTES = 1_048_576;
/** Arrays and objects nest at most this deep (`{"a": [1]}` is 2 levels): the engine's limit. */
export const MAX_DEPTH = 64;

/** What JSON holds. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

const LOSSY: ReadonlyArray<[abstract new (...args: never[]) => unknown, string]> = [
  [Map, "a Map"],
  [Set, "a Set"],
  [WeakMap, "a WeakMap"],
  [WeakSet, "a WeakSet"],
  [Promise, "a Promise"],
  [RegExp, "a RegExp"],
  [ArrayBuffer, "an ArrayBuffer"],
  [Error, "an Error"],
];

function describe(value: unknown): string {
  if (typeof value === "bigint") return "a bigint";
  if (typeof value === "symbol") return "a symbol";
  if (typeof value === "function") return "a function";
  return typeof value;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Whether `value` is Unicode text: a lone UTF-16 surrogate has no UTF-8 form. */
export function isWellFormed(value: string): boolean {
  return !LONE_SURROGATE.test(value);
}

function text(value: string, path: string): string {
  if (!isWellFormed(value)) throw new InvalidValueError(`${path}: a lone UTF-16 surrogate is not text`);
  return value;
}

/** Validate `value` and return its plain JSON form. `depth` counts the arrays and objects
 * around it. */
export function toJsonValue(value: unknown, path = "$", depth = 0, key = ""): JsonValue {
  if (value === undefined || value === null) return null;
  switch (typeof value) {
    case "boolean":
      return value;
    case "number":
      if (!Number.isFinite(value)) throw new InvalidValueError(`${path}: ${value} is not a finite number`);
      return value;
    case "string":
      return text(value, path);
    case "bigint":
    case "symbol":
    case "function":
      throw new InvalidValueError(`${path}: ${describe(value)} is not a JSON value`);
    default:
      break;
  }
  if (depth >= MAX_DEPTH) throw new InvalidValueError(`${path}: nested deeper than ${MAX_DEPTH} levels (or circular)`);
  if (value instanceof Date && Number.isNaN(value.getTime())) {
    throw new InvalidValueError(`${path}: an invalid Date is not a JSON value`);
  }
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === "function") {
    return toJsonValue(toJSON.call(value, key), path, depth, key);
  }
  if (Array.isArray(value)) {
    return value.map((item, i) => toJsonValue(item, `${path}[${i}]`, depth + 1, String(i)));
  }
  if (ArrayBuffer.isView(value)) throw new InvalidValueError(`${path}: a typed array is not a JSON value`);
  for (const [kind, name] of LOSSY) {
    if (value instanceof kind) throw new InvalidValueError(`${path}: ${name} is not a JSON value`);
  }
  const out: { [key: string]: JsonValue } = {};
  for (const [name, item] of Object.entries(value as object)) {
    if (item === undefined) continue; // as JSON.stringify: the property is left out
    out[text(name, `${path} key`)] = toJsonValue(item, `${path}.${name}`, depth + 1, name);
  }
  return out;
}

const encoder = new TextEncoder();

/** The UTF-8 size of `text`. */
export function byteLength(value: string): number {
  return encoder.encode(value).length;
}

/** Encode `value` as compact JSON text, enforcing the value rules and the 1 MiB limit. */
export function encode(value: unknown): string {
  const encoded = JSON.stringify(toJsonValue(value));
  const size = byteLength(encoded);
  if (size > MAX_VALUE_BYTES) {
    throw new OutputTooLargeError(`the value is ${size} bytes encoded, over the limit of ${MAX_VALUE_BYTES} bytes`);
  }
  return encoded;
}

/** Encode and decode again: the value the workflow sees, first run and replay alike. */
export function roundtrip(value: unknown): JsonValue {
  return JSON.parse(encode(value)) as JsonValue;
}

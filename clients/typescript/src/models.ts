/**
 * The gateway's answers as typed values, parsed from the wire once.
 *
 * A claim answers one of three: `Execute` (you hold the execution: run the effect with
 * its `idempotencyKey`, then complete it), `PassThrough` (a read: run it, record
 * nothing) and `Outcome` (the envelope of every non-executing answer and of every
 * `/v1/calls` answer). Parsing is strict about what the contract says is always there
 * and tolerant of fields it may add later (`raw` keeps the whole body).
 */

import { errorForOutcome, ProtocolError } from "./errors.js";

/** What the executor says happened: the four values `complete` accepts. */
export type CompletionOutcome = "applied" | "failed" | "unknown" | "not_sent";

/** A JSON object as the gateway sent it. */
export type JsonObject = Record<string, unknown>;

/** Why an outcome is what it is, with a stable code (`OG-0004`, docs/error-codes.md). */
export interface Reason {
  readonly code: string;
  readonly message: string;
}

/**
 * The outcome envelope: what happened to an intent, as the gateway recorded it.
 *
 * `status` is one of applied, replayed, in_flight, unknown, pending_approval, denied,
 * refused, dry_run, failed, approved. `message` is one line a model can act on
 * ("ALREADY APPLIED as ch_1 - do not call again."). `httpStatus` is the status the
 * envelope came with.
 */
export class Outcome {
  constructor(
    readonly status: string,
    readonly intentKey: string | null,
    readonly generation: number,
    readonly attempt: number,
    readonly state: string | null,
    readonly effectRef: string | null,
    readonly result: unknown,
    readonly approvalId: string | null,
    readonly reason: Reason | null,
    readonly alerts: unknown[],
    readonly message: string,
    readonly httpStatus: number,
    readonly raw: JsonObject,
  ) {}

  /** The stable code of the reason, if any. */
  get reasonCode(): string | null {
    return this.reason ? this.reason.code : null;
  }

  /** True when the provider said no: a `failed` answer, or a replay of one. */
  get failed(): boolean {
    return this.status === "failed" || (this.status === "replayed" && this.state === "failed");
  }

  /** True when the effect took place (now, before, or by reconciliation). */
  get succeeded(): boolean {
    return (this.status === "applied" || this.status === "replayed") && !this.failed;
  }

  /** Throws the typed error for an outcome that is not a success; returns this otherwise. */
  raiseForStatus(): this {
    const err = errorForOutcome(this);
    if (err !== null) throw err;
    return this;
  }
}

/**
 * A claim you hold: run the effect with `idempotencyKey`, then complete it.
 *
 * `leaseExpiresAt` is the gateway's clock; `leaseMs` is how long the lease had left when
 * the answer arrived, estimated without trusting this machine's clock alone (see
 * `leaseMsLeft`), and is what heartbeats are timed by.
 */
export class Execute {
  readonly status = "execute" as const;

  constructor(
    readonly intentKey: string,
    readonly generation: number,
    readonly attempt: number,
    readonly execution: number,
    readonly leaseExpiresAt: Date,
    readonly fencingToken: string,
    readonly idempotencyKey: string,
    readonly capability: string,
    args: JsonObject,
    readonly message: string,
    readonly leaseMs: number,
    readonly receivedAt: number,
    readonly raw: JsonObject,
  ) {
    this.arguments = args;
  }

  /** The capability arguments of the claim, as the gateway answered them. */
  readonly arguments: JsonObject;

  /** Milliseconds of lease left now, by this process's monotonic clock. */
  leaseLeftMs(now: number = performance.now()): number {
    return this.leaseMs - (now - this.receivedAt);
  }

  /**
   * True when (nearly) the whole lease is gone before the effect was sent: the claim may
   * be another attempt's by now, and a request sent with it would race that attempt
   * where no fence reaches (the gateway never sees it). The margin covers `leaseMs`
   * being estimated from a `Date` header truncated to the second.
   */
  tooLateToSend(): boolean {
    return this.leaseLeftMs() <= Math.min(1000, this.leaseMs / 2);
  }
}

/** A read capability: no intent, no key; run it yourself and record nothing. */
export class PassThrough {
  readonly status = "pass_through" as const;

  constructor(
    readonly message: string,
    readonly raw: JsonObject,
  ) {}
}

/** What `claim()` answers. */
export type ClaimAnswer = Execute | PassThrough | Outcome;

/** What `/v1/keys/derive` says about a key: which inputs entered it and why. */
export interface KeyExplanation {
  readonly key: string;
  readonly material: unknown;
  readonly inputs: unknown[];
  readonly ignored: unknown[];
  readonly notes: unknown[];
  readonly scope: unknown;
  readonly raw: JsonObject;
}

const TIMESTAMP = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|z|[+-]\d{2}:?\d{2})$/;

/**
 * An RFC 3339 timestamp as a Date. By hand, because `Date.parse` is specified for three
 * fractional digits only, and the gateway may write nine.
 */
export function parseTimestamp(text: string): Date {
  const m = TIMESTAMP.exec(text);
  if (m === null) throw new ProtocolError(`not an RFC 3339 timestamp: ${JSON.stringify(text)}`);
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const millis = Number((m[7] ?? "").padEnd(3, "0").slice(0, 3));
  let utc = Date.UTC(year, month - 1, day, hour, minute, second, millis);
  const zone = m[8] as string;
  if (zone !== "Z" && zone !== "z") {
    const sign = zone.startsWith("+") ? 1 : -1;
    const digits = zone.slice(1).replace(":", "");
    utc -= sign * (Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2))) * 60_000;
  }
  return new Date(utc);
}

/**
 * How long a lease has left, in milliseconds, without trusting this machine's clock
 * blindly (as the Python client's `lease_seconds`).
 *
 * `expiresAt` is the gateway's clock. The answer's HTTP `Date` is the gateway's clock
 * too, truncated to the second, so `expiresAt - Date` overestimates what is left by up
 * to a second. The local clock is exact when it agrees with the gateway and arbitrary
 * when it does not: it is used only when it falls within that truncation (plus half a
 * second of transit); otherwise the Date's estimate, less the second it may overstate
 * (never below half of itself). Heartbeating early costs a request; late costs the claim.
 */
export function leaseMsLeft(expiresAt: Date, serverDate: string | null, localNow: number = Date.now()): number {
  const local = expiresAt.getTime() - localNow;
  const served = serverDate ? Date.parse(serverDate) : Number.NaN;
  if (Number.isNaN(served)) return Math.max(0, local);
  const byServer = expiresAt.getTime() - served;
  if (byServer - 1500 <= local && local <= byServer + 500) return Math.max(0, Math.min(local, byServer));
  return Math.max(0, byServer - 1000, byServer / 2);
}

function str(body: JsonObject, name: string): string {
  const value = body[name];
  if (typeof value !== "string") throw new ProtocolError(`answer field ${name} should be a string, got ${JSON.stringify(value)}`);
  return value;
}

function optStr(body: JsonObject, name: string): string | null {
  const value = body[name];
  if (value === undefined || value === null) return null;
  if (typeof value !== "string") throw new ProtocolError(`answer field ${name} should be a string or null, got ${JSON.stringify(value)}`);
  return value;
}

function int(body: JsonObject, name: string, fallback: number): number {
  const value = body[name] ?? fallback;
  if (typeof value !== "number" || !Number.isInteger(value)) {
    throw new ProtocolError(`answer field ${name} should be an integer, got ${JSON.stringify(value)}`);
  }
  return value;
}

function list(body: JsonObject, name: string): unknown[] {
  const value = body[name] ?? [];
  if (!Array.isArray(value)) throw new ProtocolError(`answer field ${name} should be a list, got ${JSON.stringify(value)}`);
  return value;
}

/** The envelope in `body`. */
export function parseOutcome(body: JsonObject, httpStatus: number): Outcome {
  const rawReason = body["reason"];
  let reason: Reason | null = null;
  if (typeof rawReason === "object" && rawReason !== null && !Array.isArray(rawReason)) {
    const r = rawReason as JsonObject;
    reason = { code: String(r["code"] ?? ""), message: String(r["message"] ?? "") };
  } else if (rawReason !== undefined && rawReason !== null) {
    throw new ProtocolError(`answer field reason should be an object or null, got ${JSON.stringify(rawReason)}`);
  }
  return new Outcome(
    str(body, "status"),
    optStr(body, "intent_key"),
    int(body, "generation", 0),
    int(body, "attempt", 0),
    optStr(body, "state"),
    optStr(body, "effect_ref"),
    body["result"] ?? null,
    optStr(body, "approval_id"),
    reason,
    list(body, "alerts"),
    String(body["message"] ?? ""),
    httpStatus,
    body,
  );
}

/** An execute answer (or a heartbeat's, which has the same shape). */
export function parseExecute(body: JsonObject, serverDate: string | null): Execute {
  const expires = parseTimestamp(str(body, "lease_expires_at"));
  const args = body["arguments"] ?? {};
  if (typeof args !== "object" || args === null || Array.isArray(args)) {
    throw new ProtocolError(`answer field arguments should be an object, got ${JSON.stringify(args)}`);
  }
  return new Execute(
    str(body, "intent_key"),
    int(body, "generation", 1),
    int(body, "attempt", 1),
    int(body, "execution", 1),
    expires,
    str(body, "fencing_token"),
    str(body, "idempotency_key"),
    String(body["capability"] ?? ""),
    args as JsonObject,
    String(body["message"] ?? ""),
    leaseMsLeft(expires, serverDate),
    performance.now(),
    body,
  );
}

/** A claim's answer: execute, pass_through, or the envelope. */
export function parseClaim(body: JsonObject, httpStatus: number, serverDate: string | null): ClaimAnswer {
  if (body["status"] === "execute") return parseExecute(body, serverDate);
  if (body["status"] === "pass_through") return new PassThrough(String(body["message"] ?? ""), body);
  return parseOutcome(body, httpStatus);
}

/** A `/v1/keys/derive` answer. */
export function parseKeyExplanation(body: JsonObject): KeyExplanation {
  return {
    key: str(body, "key"),
    material: body["material"],
    inputs: list(body, "inputs"),
    ignored: list(body, "ignored"),
    notes: list(body, "notes"),
    scope: body["scope"],
    raw: body,
  };
}

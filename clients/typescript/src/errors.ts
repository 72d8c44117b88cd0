/**
 * Every error the client throws: one base, `OncegateError`, and a class per situation.
 *
 * Two families, as in the Python client:
 *
 * - outcomes that are not a success (`OutcomeError` and its subclasses): the gateway
 *   decided, and the decision is "not now" or "no". Each carries the intent key and the
 *   envelope's `message`, a line written for a model ("IN PROGRESS: another attempt is
 *   executing this - do not call again."), and `String(err)` is that line, so a tool
 *   wrapper can hand it straight back to the model;
 * - the gateway could not be asked, or refused the request itself (`GatewayUnavailable`,
 *   `GatewayError`, `StaleClaim`).
 */

import type { Outcome } from "./models.js";

/** Base of every error this client throws. `intentKey` is null when no intent exists. */
export class OncegateError extends Error {
  readonly intentKey: string | null;

  constructor(message: string, options: { intentKey?: string | null; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.intentKey = options.intentKey ?? null;
  }

  /** The message alone, without the class name: the line a model is shown. */
  override toString(): string {
    return this.message;
  }
}

/** The gateway decided, and nothing was executed by this call. `outcome` is the envelope. */
export class OutcomeError extends OncegateError {
  readonly outcome: Outcome;

  constructor(outcome: Outcome) {
    super(outcome.message || outcome.status, { intentKey: outcome.intentKey });
    this.outcome = outcome;
  }

  /** The reason's stable code (`OG-0004`, ...), if the gateway gave one. */
  get code(): string | null {
    return this.outcome.reasonCode;
  }
}

/** Another attempt holds the claim and is executing. Do not re-issue; ask again later. */
export class InFlight extends OutcomeError {}

/**
 * An earlier attempt's outcome is not known yet; the gateway is reconciling it with the
 * provider. Do not re-issue: a later call answers what the provider's record says.
 */
export class OutcomeUnknown extends OutcomeError {}

/** Held for a human. `approvalId` names the request an approver decides. */
export class PendingApproval extends OutcomeError {
  get approvalId(): string | null {
    return this.outcome.approvalId;
  }
}

/** Policy or a human said no. `code` says which rule. */
export class Denied extends OutcomeError {}

/**
 * Attempt ceiling, breaker, hold, kill switch, cross-run or store down (`code`).
 * `OG-0007` (store unavailable) and `OG-0015` (contention) are worth retrying later; the
 * others need a human.
 */
export class Refused extends OutcomeError {}

/**
 * The provider said no (definitely: nothing happened), now or on an earlier attempt.
 * `result` is what the provider answered, as stored. Retrying the same intent replays
 * this failure; change the arguments (a different intent) to try again.
 */
export class Failed extends OutcomeError {
  get result(): unknown {
    return this.outcome.result;
  }
}

/**
 * The capability (or this agent) is in dry-run mode: nothing was executed. Thrown rather
 * than returning undefined, so code expecting the effect's result cannot mistake
 * "nothing happened" for an answer.
 */
export class DryRun extends OutcomeError {}

/** Code tried to execute or record an intent that was already applied. */
export class Replayed extends OutcomeError {
  get result(): unknown {
    return this.outcome.result;
  }
}

/**
 * The gateway refused the request itself (`{"error": {"code", "message"}}`). `code` is
 * the stable code (`OG-0054` bad token, `OG-0013` forbidden, `OG-0016` unknown
 * capability, `OG-0009` malformed, ...), `statusCode` the HTTP status.
 */
export class GatewayError extends OncegateError {
  readonly code: string | null;
  readonly statusCode: number;
  readonly body: unknown;

  constructor(
    message: string,
    options: { code: string | null; statusCode: number; intentKey?: string | null; body?: unknown },
  ) {
    super(message, { intentKey: options.intentKey ?? null });
    this.code = options.code;
    this.statusCode = options.statusCode;
    this.body = options.body;
  }

  override toString(): string {
    return `${this.code ? `${this.code}: ` : ""}${this.message} (HTTP ${this.statusCode})`;
  }
}

/**
 * The claim is no longer yours (OG-0024): its lease expired or a newer attempt superseded
 * it. Nothing was recorded by the request that got this.
 *
 * Thrown by a protected function after it returned when a heartbeat or the completion
 * found the claim lost: the effect may have happened (`value` holds what the function
 * returned), and the gateway reconciles the intent with the provider. Do not re-run the
 * effect; a later call of the same intent answers what the provider's record says.
 */
export class StaleClaim extends GatewayError {
  value: unknown = undefined;

  constructor(
    message: string,
    options: { code?: string | null; statusCode?: number; intentKey?: string | null; body?: unknown } = {},
  ) {
    super(message, {
      code: options.code === undefined ? "OG-0024" : options.code,
      statusCode: options.statusCode ?? 409,
      intentKey: options.intentKey ?? null,
      body: options.body,
    });
  }
}

/**
 * The gateway could not be reached, or answered 5xx without an outcome. Thrown by a
 * claim, nothing was executed: the protected function was not called.
 */
export class GatewayUnavailable extends OncegateError {
  readonly statusCode: number | null;
  readonly code: string | null;

  constructor(
    message: string,
    options: { intentKey?: string | null; statusCode?: number | null; code?: string | null; cause?: unknown } = {},
  ) {
    super(message, { intentKey: options.intentKey ?? null, cause: options.cause });
    this.statusCode = options.statusCode ?? null;
    this.code = options.code ?? null;
  }
}

/**
 * The effect's outcome could not be recorded after several tries. The claim's lease will
 * expire and the gateway will reconcile the intent with the provider. `value` holds what
 * the protected function returned, `outcome` what the client tried to record.
 */
export class CompletionNotRecorded extends GatewayUnavailable {
  readonly outcome: string;
  value: unknown = undefined;

  constructor(message: string, options: { intentKey: string | null; outcome: string; cause?: unknown }) {
    super(message, { intentKey: options.intentKey, cause: options.cause });
    this.outcome = options.outcome;
  }
}

/** An answer that does not have the shape the wire contract promises. */
export class ProtocolError extends OncegateError {}

type OutcomeErrorClass = new (outcome: Outcome) => OutcomeError;

const BY_STATUS: Record<string, OutcomeErrorClass> = {
  in_flight: InFlight,
  unknown: OutcomeUnknown,
  pending_approval: PendingApproval,
  denied: Denied,
  refused: Refused,
  failed: Failed,
  dry_run: DryRun,
};

/**
 * The typed error for a non-success outcome; null for applied, replayed and approved. A
 * replay of a failure (status `replayed`, state `failed`) is `Failed`: the provider said
 * no before, and that is still the answer.
 */
export function errorForOutcome(outcome: Outcome): OutcomeError | null {
  if (outcome.failed) return new Failed(outcome);
  const cls = Object.hasOwn(BY_STATUS, outcome.status) ? BY_STATUS[outcome.status] : undefined;
  if (cls !== undefined) return new cls(outcome);
  // "approved" answers an approver (nothing executed yet); a claim never gets it.
  if (outcome.succeeded || outcome.status === "approved") return null;
  // A status this client does not know: not a success it can vouch for.
  return new OutcomeError(outcome);
}

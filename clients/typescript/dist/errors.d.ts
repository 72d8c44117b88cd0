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
export declare class OncegateError extends Error {
    readonly intentKey: string | null;
    constructor(message: string, options?: {
        intentKey?: string | null;
        cause?: unknown;
    });
    /** The message alone, without the class name: the line a model is shown. */
    toString(): string;
}
/** The gateway decided, and nothing was executed by this call. `outcome` is the envelope. */
export declare class OutcomeError extends OncegateError {
    readonly outcome: Outcome;
    constructor(outcome: Outcome);
    /** The reason's stable code (`OG-0004`, ...), if the gateway gave one. */
    get code(): string | null;
}
/** Another attempt holds the claim and is executing. Do not re-issue; ask again later. */
export declare class InFlight extends OutcomeError {
}
/**
 * An earlier attempt's outcome is not known yet; the gateway is reconciling it with the
 * provider. Do not re-issue: a later call answers what the provider's record says.
 */
export declare class OutcomeUnknown extends OutcomeError {
}
/** Held for a human. `approvalId` names the request an approver decides. */
export declare class PendingApproval extends OutcomeError {
    get approvalId(): string | null;
}
/** Policy or a human said no. `code` says which rule. */
export declare class Denied extends OutcomeError {
}
/**
 * Attempt ceiling, breaker, hold, kill switch, cross-run or store down (`code`).
 * `OG-0007` (store unavailable) and `OG-0015` (contention) are worth retrying later; the
 * others need a human.
 */
export declare class Refused extends OutcomeError {
}
/**
 * The provider said no (definitely: nothing happened), now or on an earlier attempt.
 * `result` is what the provider answered, as stored. Retrying the same intent replays
 * this failure; change the arguments (a different intent) to try again.
 */
export declare class Failed extends OutcomeError {
    get result(): unknown;
}
/**
 * The capability (or this agent) is in dry-run mode: nothing was executed. Thrown rather
 * than returning undefined, so code expecting the effect's result cannot mistake
 * "nothing happened" for an answer.
 */
export declare class DryRun extends OutcomeError {
}
/** Code tried to execute or record an intent that was already applied. */
export declare class Replayed extends OutcomeError {
    get result(): unknown;
}
/**
 * The gateway refused the request itself (`{"error": {"code", "message"}}`). `code` is
 * the stable code (`OG-0054` bad token, `OG-0013` forbidden, `OG-0016` unknown
 * capability, `OG-0009` malformed, ...), `statusCode` the HTTP status.
 */
export declare class GatewayError extends OncegateError {
    readonly code: string | null;
    readonly statusCode: number;
    readonly body: unknown;
    constructor(message: string, options: {
        code: string | null;
        statusCode: number;
        intentKey?: string | null;
        body?: unknown;
    });
    toString(): string;
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
export declare class StaleClaim extends GatewayError {
    value: unknown;
    constructor(message: string, options?: {
        code?: string | null;
        statusCode?: number;
        intentKey?: string | null;
        body?: unknown;
    });
}
/**
 * The gateway could not be reached, or answered 5xx without an outcome. Thrown by a
 * claim, nothing was executed: the protected function was not called.
 */
export declare class GatewayUnavailable extends OncegateError {
    readonly statusCode: number | null;
    readonly code: string | null;
    constructor(message: string, options?: {
        intentKey?: string | null;
        statusCode?: number | null;
        code?: string | null;
        cause?: unknown;
    });
}
/**
 * The effect's outcome could not be recorded after several tries. The claim's lease will
 * expire and the gateway will reconcile the intent with the provider. `value` holds what
 * the protected function returned, `outcome` what the client tried to record.
 */
export declare class CompletionNotRecorded extends GatewayUnavailable {
    readonly outcome: string;
    value: unknown;
    constructor(message: string, options: {
        intentKey: string | null;
        outcome: string;
        cause?: unknown;
    });
}
/** An answer that does not have the shape the wire contract promises. */
export declare class ProtocolError extends OncegateError {
}
/**
 * The typed error for a non-success outcome; null for applied, replayed and approved. A
 * replay of a failure (status `replayed`, state `failed`) is `Failed`: the provider said
 * no before, and that is still the answer.
 */
export declare function errorForOutcome(outcome: Outcome): OutcomeError | null;

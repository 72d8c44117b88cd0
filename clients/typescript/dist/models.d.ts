/**
 * The gateway's answers as typed values, parsed from the wire once.
 *
 * A claim answers one of three: `Execute` (you hold the execution: run the effect with
 * its `idempotencyKey`, then complete it), `PassThrough` (a read: run it, record
 * nothing) and `Outcome` (the envelope of every non-executing answer and of every
 * `/v1/calls` answer). Parsing is strict about what the contract says is always there
 * and tolerant of fields it may add later (`raw` keeps the whole body).
 */
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
export declare class Outcome {
    readonly status: string;
    readonly intentKey: string | null;
    readonly generation: number;
    readonly attempt: number;
    readonly state: string | null;
    readonly effectRef: string | null;
    readonly result: unknown;
    readonly approvalId: string | null;
    readonly reason: Reason | null;
    readonly alerts: unknown[];
    readonly message: string;
    readonly httpStatus: number;
    readonly raw: JsonObject;
    constructor(status: string, intentKey: string | null, generation: number, attempt: number, state: string | null, effectRef: string | null, result: unknown, approvalId: string | null, reason: Reason | null, alerts: unknown[], message: string, httpStatus: number, raw: JsonObject);
    /** The stable code of the reason, if any. */
    get reasonCode(): string | null;
    /** True when the provider said no: a `failed` answer, or a replay of one. */
    get failed(): boolean;
    /** True when the effect took place (now, before, or by reconciliation). */
    get succeeded(): boolean;
    /** Throws the typed error for an outcome that is not a success; returns this otherwise. */
    raiseForStatus(): this;
}
/**
 * A claim you hold: run the effect with `idempotencyKey`, then complete it.
 *
 * `leaseExpiresAt` is the gateway's clock; `leaseMs` is how long the lease had left when
 * the answer arrived, estimated without trusting this machine's clock alone (see
 * `leaseMsLeft`), and is what heartbeats are timed by.
 */
export declare class Execute {
    readonly intentKey: string;
    readonly generation: number;
    readonly attempt: number;
    readonly execution: number;
    readonly leaseExpiresAt: Date;
    readonly fencingToken: string;
    readonly idempotencyKey: string;
    readonly capability: string;
    readonly message: string;
    readonly leaseMs: number;
    readonly receivedAt: number;
    readonly raw: JsonObject;
    readonly status: "execute";
    constructor(intentKey: string, generation: number, attempt: number, execution: number, leaseExpiresAt: Date, fencingToken: string, idempotencyKey: string, capability: string, args: JsonObject, message: string, leaseMs: number, receivedAt: number, raw: JsonObject);
    /** The capability arguments of the claim, as the gateway answered them. */
    readonly arguments: JsonObject;
    /** Milliseconds of lease left now, by this process's monotonic clock. */
    leaseLeftMs(now?: number): number;
    /**
     * True when (nearly) the whole lease is gone before the effect was sent: the claim may
     * be another attempt's by now, and a request sent with it would race that attempt
     * where no fence reaches (the gateway never sees it). The margin covers `leaseMs`
     * being estimated from a `Date` header truncated to the second.
     */
    tooLateToSend(): boolean;
}
/** A read capability: no intent, no key; run it yourself and record nothing. */
export declare class PassThrough {
    readonly message: string;
    readonly raw: JsonObject;
    readonly status: "pass_through";
    constructor(message: string, raw: JsonObject);
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
/**
 * An RFC 3339 timestamp as a Date. By hand, because `Date.parse` is specified for three
 * fractional digits only, and the gateway may write nine.
 */
export declare function parseTimestamp(text: string): Date;
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
export declare function leaseMsLeft(expiresAt: Date, serverDate: string | null, localNow?: number): number;
/** The envelope in `body`. */
export declare function parseOutcome(body: JsonObject, httpStatus: number): Outcome;
/** An execute answer (or a heartbeat's, which has the same shape). */
export declare function parseExecute(body: JsonObject, serverDate: string | null): Execute;
/** A claim's answer: execute, pass_through, or the envelope. */
export declare function parseClaim(body: JsonObject, httpStatus: number, serverDate: string | null): ClaimAnswer;
/** A `/v1/keys/derive` answer. */
export declare function parseKeyExplanation(body: JsonObject): KeyExplanation;

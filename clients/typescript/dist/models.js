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
/**
 * The outcome envelope: what happened to an intent, as the gateway recorded it.
 *
 * `status` is one of applied, replayed, in_flight, unknown, pending_approval, denied,
 * refused, dry_run, failed, approved. `message` is one line a model can act on
 * ("ALREADY APPLIED as ch_1 - do not call again."). `httpStatus` is the status the
 * envelope came with.
 */
export class Outcome {
    status;
    intentKey;
    generation;
    attempt;
    state;
    effectRef;
    result;
    approvalId;
    reason;
    alerts;
    message;
    httpStatus;
    raw;
    constructor(status, intentKey, generation, attempt, state, effectRef, result, approvalId, reason, alerts, message, httpStatus, raw) {
        this.status = status;
        this.intentKey = intentKey;
        this.generation = generation;
        this.attempt = attempt;
        this.state = state;
        this.effectRef = effectRef;
        this.result = result;
        this.approvalId = approvalId;
        this.reason = reason;
        this.alerts = alerts;
        this.message = message;
        this.httpStatus = httpStatus;
        this.raw = raw;
    }
    /** The stable code of the reason, if any. */
    get reasonCode() {
        return this.reason ? this.reason.code : null;
    }
    /** True when the provider said no: a `failed` answer, or a replay of one. */
    get failed() {
        return this.status === "failed" || (this.status === "replayed" && this.state === "failed");
    }
    /** True when the effect took place (now, before, or by reconciliation). */
    get succeeded() {
        return (this.status === "applied" || this.status === "replayed") && !this.failed;
    }
    /** Throws the typed error for an outcome that is not a success; returns this otherwise. */
    raiseForStatus() {
        const err = errorForOutcome(this);
        if (err !== null)
            throw err;
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
    intentKey;
    generation;
    attempt;
    execution;
    leaseExpiresAt;
    fencingToken;
    idempotencyKey;
    capability;
    message;
    leaseMs;
    receivedAt;
    raw;
    status = "execute";
    constructor(intentKey, generation, attempt, execution, leaseExpiresAt, fencingToken, idempotencyKey, capability, args, message, leaseMs, receivedAt, raw) {
        this.intentKey = intentKey;
        this.generation = generation;
        this.attempt = attempt;
        this.execution = execution;
        this.leaseExpiresAt = leaseExpiresAt;
        this.fencingToken = fencingToken;
        this.idempotencyKey = idempotencyKey;
        this.capability = capability;
        this.message = message;
        this.leaseMs = leaseMs;
        this.receivedAt = receivedAt;
        this.raw = raw;
        this.arguments = args;
    }
    /** The capability arguments of the claim, as the gateway answered them. */
    arguments;
    /** Milliseconds of lease left now, by this process's monotonic clock. */
    leaseLeftMs(now = performance.now()) {
        return this.leaseMs - (now - this.receivedAt);
    }
    /**
     * True when (nearly) the whole lease is gone before the effect was sent: the claim may
     * be another attempt's by now, and a request sent with it would race that attempt
     * where no fence reaches (the gateway never sees it). The margin covers `leaseMs`
     * being estimated from a `Date` header truncated to the second.
     */
    tooLateToSend() {
        return this.leaseLeftMs() <= Math.min(1000, this.leaseMs / 2);
    }
}
/** A read capability: no intent, no key; run it yourself and record nothing. */
export class PassThrough {
    message;
    raw;
    status = "pass_through";
    constructor(message, raw) {
        this.message = message;
        this.raw = raw;
    }
}
const TIMESTAMP = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|z|[+-]\d{2}:?\d{2})$/;
/**
 * An RFC 3339 timestamp as a Date. By hand, because `Date.parse` is specified for three
 * fractional digits only, and the gateway may write nine.
 */
export function parseTimestamp(text) {
    const m = TIMESTAMP.exec(text);
    if (m === null)
        throw new ProtocolError(`not an RFC 3339 timestamp: ${JSON.stringify(text)}`);
    const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number);
    const millis = Number((m[7] ?? "").padEnd(3, "0").slice(0, 3));
    let utc = Date.UTC(year, month - 1, day, hour, minute, second, millis);
    const zone = m[8];
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
export function leaseMsLeft(expiresAt, serverDate, localNow = Date.now()) {
    const local = expiresAt.getTime() - localNow;
    const served = serverDate ? Date.parse(serverDate) : Number.NaN;
    if (Number.isNaN(served))
        return Math.max(0, local);
    const byServer = expiresAt.getTime() - served;
    if (byServer - 1500 <= local && local <= byServer + 500)
        return Math.max(0, Math.min(local, byServer));
    return Math.max(0, byServer - 1000, byServer / 2);
}
function str(body, name) {
    const value = body[name];
    if (typeof value !== "string")
        throw new ProtocolError(`answer field ${name} should be a string, got ${JSON.stringify(value)}`);
    return value;
}
function optStr(body, name) {
    const value = body[name];
    if (value === undefined || value === null)
        return null;
    if (typeof value !== "string")
        throw new ProtocolError(`answer field ${name} should be a string or null, got ${JSON.stringify(value)}`);
    return value;
}
function int(body, name, fallback) {
    const value = body[name] ?? fallback;
    if (typeof value !== "number" || !Number.isInteger(value)) {
        throw new ProtocolError(`answer field ${name} should be an integer, got ${JSON.stringify(value)}`);
    }
    return value;
}
function list(body, name) {
    const value = body[name] ?? [];
    if (!Array.isArray(value))
        throw new ProtocolError(`answer field ${name} should be a list, got ${JSON.stringify(value)}`);
    return value;
}
/** The envelope in `body`. */
export function parseOutcome(body, httpStatus) {
    const rawReason = body["reason"];
    let reason = null;
    if (typeof rawReason === "object" && rawReason !== null && !Array.isArray(rawReason)) {
        const r = rawReason;
        reason = { code: String(r["code"] ?? ""), message: String(r["message"] ?? "") };
    }
    else if (rawReason !== undefined && rawReason !== null) {
        throw new ProtocolError(`answer field reason should be an object or null, got ${JSON.stringify(rawReason)}`);
    }
    return new Outcome(str(body, "status"), optStr(body, "intent_key"), int(body, "generation", 0), int(body, "attempt", 0), optStr(body, "state"), optStr(body, "effect_ref"), body["result"] ?? null, optStr(body, "approval_id"), reason, list(body, "alerts"), String(body["message"] ?? ""), httpStatus, body);
}
/** An execute answer (or a heartbeat's, which has the same shape). */
export function parseExecute(body, serverDate) {
    const expires = parseTimestamp(str(body, "lease_expires_at"));
    const args = body["arguments"] ?? {};
    if (typeof args !== "object" || args === null || Array.isArray(args)) {
        throw new ProtocolError(`answer field arguments should be an object, got ${JSON.stringify(args)}`);
    }
    return new Execute(str(body, "intent_key"), int(body, "generation", 1), int(body, "attempt", 1), int(body, "execution", 1), expires, str(body, "fencing_token"), str(body, "idempotency_key"), String(body["capability"] ?? ""), args, String(body["message"] ?? ""), leaseMsLeft(expires, serverDate), performance.now(), body);
}
/** A claim's answer: execute, pass_through, or the envelope. */
export function parseClaim(body, httpStatus, serverDate) {
    if (body["status"] === "execute")
        return parseExecute(body, serverDate);
    if (body["status"] === "pass_through")
        return new PassThrough(String(body["message"] ?? ""), body);
    return parseOutcome(body, httpStatus);
}
/** A `/v1/keys/derive` answer. */
export function parseKeyExplanation(body) {
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

/**
 * Requests and answers of the gateway's JSON API, without I/O: what is sent (paths,
 * bodies, headers) and how an answer is read (envelope, execute, error body, garbage),
 * decided here once, as in the Python client's `_wire`.
 */
import { checkHeaderValue, current } from "./context.js";
import { GatewayError, GatewayUnavailable, StaleClaim } from "./errors.js";
const COMPLETIONS = ["applied", "failed", "unknown", "not_sent"];
const STALE = "OG-0024";
/** Builds every request the client sends, with the token and the run/step headers. */
export class Wire {
    base;
    constructor(token, extra = {}) {
        if (typeof token !== "string" || token.length === 0) {
            throw new TypeError("a bearer token is required (the principal comes from the token alone)");
        }
        this.base = { Authorization: `Bearer ${token}`, Accept: "application/json", ...extra };
    }
    headers(options = {}) {
        const ctx = current();
        const h = { ...this.base };
        const run = options.runId ?? ctx.runId;
        const step = options.stepId ?? ctx.stepId;
        if (run !== null)
            h["Oncegate-Run-Id"] = checkHeaderValue("run id", run);
        if (step !== null)
            h["Oncegate-Step-Id"] = checkHeaderValue("step id", step);
        if (options.idempotencyKey !== undefined) {
            h["Idempotency-Key"] = checkHeaderValue("Idempotency-Key", options.idempotencyKey);
        }
        return h;
    }
    /** A request the gateway decides (a claim or a call): the same body and headers. */
    decided(path, capability, args, options = {}) {
        return { method: "POST", path, body: { capability, arguments: checkArguments(args) }, headers: this.headers(options) };
    }
    complete(intentKey, fencingToken, outcome, record = {}) {
        if (!COMPLETIONS.includes(outcome)) {
            throw new RangeError(`outcome must be one of ${COMPLETIONS.join(", ")}, not ${JSON.stringify(outcome)}`);
        }
        const body = { fencing_token: fencingToken, outcome };
        if (record.effectRef !== undefined && record.effectRef !== null)
            body["effect_ref"] = record.effectRef;
        if (record.result !== undefined && record.result !== null)
            body["result"] = record.result;
        if (record.error !== undefined && record.error !== null)
            body["error"] = record.error;
        return { method: "POST", path: `/v1/intents/${segment(intentKey)}/complete`, body, headers: this.headers() };
    }
    heartbeat(intentKey, fencingToken, timeoutMs) {
        return {
            method: "POST",
            path: `/v1/intents/${segment(intentKey)}/heartbeat`,
            body: { fencing_token: fencingToken },
            headers: this.headers(),
            ...(timeoutMs === undefined ? {} : { timeoutMs }),
        };
    }
    deriveKey(capability, args, options = {}) {
        const ctx = current();
        const body = { capability, arguments: checkArguments(args) };
        const run = options.runId ?? ctx.runId;
        const step = options.stepId ?? ctx.stepId;
        if (run !== null)
            body["run_id"] = run;
        if (step !== null)
            body["step_id"] = step;
        return { method: "POST", path: "/v1/keys/derive", body, headers: this.headers(options) };
    }
    get(path) {
        return { method: "GET", path, body: undefined, headers: { ...this.base } };
    }
    decide(approvalId, verdict) {
        return { method: "POST", path: `/v1/approvals/${segment(approvalId)}/${verdict}`, body: {}, headers: { ...this.base } };
    }
}
function checkArguments(args) {
    const value = args ?? {};
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
        throw new TypeError("capability arguments must be an object of names to values");
    }
    return value;
}
/** One path segment: an intent key or approval id, escaped. */
export function segment(value) {
    if (!value)
        throw new TypeError("an intent key or approval id is required");
    return encodeURIComponent(value);
}
/**
 * The JSON object of an answer that carries one (an envelope, a claim, a record). Throws
 * the typed error for `{"error": ...}` bodies and for answers with no JSON object:
 * `StaleClaim` for OG-0024, `GatewayUnavailable` for 5xx (no decision was made),
 * `GatewayError` otherwise.
 */
export function decode(status, text, intentKey = null) {
    let body = null;
    try {
        body = JSON.parse(text);
    }
    catch {
        body = null;
    }
    const object = typeof body === "object" && body !== null && !Array.isArray(body) ? body : null;
    // Only a 4xx/5xx is an error answer: an intent record (200) has an "error" member of
    // its own, the attempt's.
    const error = object?.["error"];
    if (status >= 400 && object !== null && typeof error === "object" && error !== null && !("status" in object)) {
        const err = error;
        const code = typeof err["code"] === "string" ? err["code"] : null;
        const message = String(err["message"] ?? code ?? `HTTP ${status}`);
        if (code === STALE)
            throw new StaleClaim(message, { statusCode: status, intentKey, body: object });
        if (status >= 500) {
            throw new GatewayUnavailable(`${code ? `${code}: ` : ""}${message}`, { intentKey, statusCode: status, code });
        }
        throw new GatewayError(message, { code, statusCode: status, intentKey, body: object });
    }
    if (object !== null && ((status >= 200 && status < 300) || typeof object["status"] === "string"))
        return object;
    const snippet = JSON.stringify(text.slice(0, 200));
    if (status >= 500) {
        throw new GatewayUnavailable(`the gateway answered HTTP ${status} without an outcome: ${snippet}`, {
            intentKey,
            statusCode: status,
        });
    }
    throw new GatewayError(`unexpected answer: ${snippet}`, { code: null, statusCode: status, intentKey, body });
}
/** Backoff before each retry of a completion: 250 ms, 500 ms, 1 s, 2 s, ... capped at 4 s. */
export function retryDelays(retries, firstMs = 250, capMs = 4000) {
    return Array.from({ length: Math.max(0, retries) }, (_, i) => Math.min(capMs, firstMs * 2 ** i));
}

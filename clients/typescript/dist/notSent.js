/**
 * Which errors prove that nothing reached the provider.
 *
 * When a protected function throws, the client records `unknown` (the effect may have
 * happened: oncegate reconciles with the provider before anything runs again), EXCEPT
 * for errors that can only happen before a byte of the request left: then it records
 * `not_sent`, and the next claim executes again at once. Calling an error "not sent"
 * that was sent can cause a second effect, so the list is short and strict. An error
 * counts when its own `code`, or (for `fetch`'s `TypeError: fetch failed` only) the
 * `code` of its direct `cause`, is one of:
 *
 * - `ECONNREFUSED`: the connection was refused;
 * - `ENOTFOUND`, `EAI_AGAIN`: the host name did not resolve;
 * - `UND_ERR_CONNECT_TIMEOUT`: undici gave up before the connection (and TLS) was up;
 * - a TLS certificate that failed verification (`CERT_HAS_EXPIRED`,
 *   `DEPTH_ZERO_SELF_SIGNED_CERT`, `SELF_SIGNED_CERT_IN_CHAIN`,
 *   `UNABLE_TO_VERIFY_LEAF_SIGNATURE`, `UNABLE_TO_GET_ISSUER_CERT_LOCALLY`,
 *   `ERR_TLS_CERT_ALTNAME_INVALID`): refused during the handshake.
 *
 * And one known SDK's own refusal to build a request at all: `openai`'s `OpenAIError`
 * itself (not a subclass such as `APIError`) whose message starts "Missing credentials.",
 * thrown by `new OpenAI()` when no key is configured, as the client is constructed. It
 * is matched by class name and message, since this package depends on no SDK.
 *
 * NOT on the list, on purpose: a reset (`ECONNRESET`, undici's `UND_ERR_SOCKET` "other
 * side closed"), a broken pipe, a timeout after the connection was made (an aborted
 * `AbortSignal.timeout`, `UND_ERR_HEADERS_TIMEOUT`, `UND_ERR_BODY_TIMEOUT`), and any
 * 5xx answer: the request may have been processed. Nor what the classification cannot
 * see: a function that makes one effecting call and then fails to CONNECT for a second
 * one must catch that second error itself (or be protected with `notSent: never`).
 *
 * The cause chain is not followed beyond `fetch`'s own wrapper: SDKs retry by default
 * (the OpenAI and Anthropic SDKs, several email SDKs), so an SDK error caused by a
 * refused connection may come from the third try of a request whose first try reached
 * the provider and timed out. Register an SDK's own connect error, or a predicate that
 * knows how that SDK retries:
 *
 * ```ts
 * notSent.register(MySdkConnectError);
 * notSent.registerPredicate((e) => e instanceof MySdkError && e.kind === "connect");
 * ```
 *
 * Runtimes other than Node name these failures differently (Deno: a `TypeError` with no
 * code; Bun: its own codes): register theirs the same way.
 */
/** The codes that prove nothing was sent, as listed above. */
export const BUILTIN_CODES = Object.freeze([
    "ECONNREFUSED",
    "ENOTFOUND",
    "EAI_AGAIN",
    "UND_ERR_CONNECT_TIMEOUT",
    "CERT_HAS_EXPIRED",
    "DEPTH_ZERO_SELF_SIGNED_CERT",
    "SELF_SIGNED_CERT_IN_CHAIN",
    "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
    "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
    "ERR_TLS_CERT_ALTNAME_INVALID",
]);
let codes = new Set(BUILTIN_CODES);
let classes = [];
let predicates = [];
/** Adds error classes (and their subclasses) whose instances prove nothing was sent. */
export function register(...types) {
    for (const t of types) {
        if (typeof t !== "function")
            throw new TypeError(`notSent.register takes error classes, not ${String(t)}`);
    }
    classes = [...classes, ...types.filter((t) => !classes.includes(t))];
}
/** Adds `code` values (on the error itself, or on fetch's direct cause) that prove it. */
export function registerCode(...more) {
    codes = new Set([...codes, ...more]);
}
/** Adds a test for errors a class or code alone cannot classify. */
export function registerPredicate(predicate) {
    predicates = [...predicates, predicate];
}
/** A `notSent` rule that records every error as `unknown`. */
export const never = () => false;
/** True when `error` itself (or fetch's direct cause of it) proves nothing was sent. */
export function isNotSent(error) {
    if (hasNotSentCode(error))
        return true;
    if (isFetchFailure(error) && hasNotSentCode(error.cause))
        return true;
    if (isSdkConfigurationError(error))
        return true;
    if (classes.some((c) => error instanceof c))
        return true;
    return predicates.some((p) => p(error));
}
/** undici's wrapper: `fetch` rejects with `TypeError("fetch failed", { cause })`. */
function isFetchFailure(error) {
    return error instanceof TypeError && error.message === "fetch failed";
}
function hasNotSentCode(error) {
    if (typeof error !== "object" || error === null)
        return false;
    const code = error.code;
    return typeof code === "string" && codes.has(code);
}
/** `new OpenAI()` without credentials: the exact base class, before any client exists. */
function isSdkConfigurationError(error) {
    if (!(error instanceof Error))
        return false;
    const constructorName = Object.getPrototypeOf(error)?.constructor?.name;
    return constructorName === "OpenAIError" && error.message.startsWith("Missing credentials.");
}

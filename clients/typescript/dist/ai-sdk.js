/**
 * `oncegate/ai-sdk`: a protected function as a Vercel AI SDK (`ai` 7) tool, whose held
 * calls go through the SDK's own tool-approval flow.
 *
 * ```ts
 * import { generateText } from "ai";
 * import { oncegateTool, toolApproval, deferToOncegate } from "oncegate/ai-sdk";
 *
 * const tools = { charge_card: oncegateTool(chargeCard, { description: "Charge an order", inputSchema }) };
 * const first = await generateText({ model, tools, toolApproval: toolApproval(tools), prompt });
 * // a held call: first.content has a `tool-approval-request` (its reason names the oncegate
 * // approval, ap_…); an approver decides it in oncegate (console, CLI or API), then:
 * const messages = [...prompt, ...first.responseMessages, deferToOncegate(first.content)];
 * const next = await generateText({ model, tools, toolApproval: toolApproval(tools), messages });
 * ```
 *
 * The approval function claims before the SDK runs the tool. A call oncegate holds
 * answers `user-approval` (the SDK stops the run with a `tool-approval-request` whose
 * reason is oncegate's line, approval id included); a claim that grants the execution is
 * kept, by tool call id, for the `execute` that follows, so each call claims once. On the
 * resumed run the SDK asks the approval function again, and oncegate's decision rules:
 * approved, the claim executes the function once; denied, the SDK records
 * `execution-denied` with the deny's line as the reason. A re-plan of an executed intent
 * replays its result without running the function.
 *
 * Without `toolApproval(tools)` the tool's own `needsApproval` still pauses a held call
 * (a boolean: the deny then reaches the model as the tool's error, "DENIED: ...").
 *
 * Nothing from `ai` is imported at run time (a tool is a plain object); its types are.
 */
import { Denied, PendingApproval, errorForOutcome } from "./errors.js";
import { Execute, Outcome } from "./models.js";
import { protectedInternals } from "./protect.js";
const APPROVAL = Symbol.for("oncegate.ai-sdk.approval");
/**
 * An AI SDK tool that runs `fn` (a `gate.protect(...)` function taking the tool's input
 * object) at most once per intent, with oncegate's holds as the SDK's approvals.
 */
export function oncegateTool(fn, options) {
    const internals = protectedInternals(fn);
    const kept = new Map();
    const approval = async (input, { toolCallId }) => {
        const answer = await internals.gate.claim(internals.capability, internals.capabilityArguments(input));
        if (answer instanceof Execute) {
            kept.set(toolCallId, answer);
            return { type: "not-applicable" };
        }
        if (answer instanceof Outcome) {
            const err = errorForOutcome(answer);
            if (err instanceof PendingApproval)
                return { type: "user-approval", reason: err.message };
            if (err instanceof Denied)
                return { type: "denied", reason: err.message };
        }
        return { type: "not-applicable" };
    };
    const made = {
        ...(options.description === undefined ? {} : { description: options.description }),
        inputSchema: options.inputSchema,
        needsApproval: async (input, { toolCallId }) => (await approval(input, { toolCallId })).type === "user-approval",
        execute: async (input, { toolCallId }) => {
            const first = kept.get(toolCallId);
            kept.delete(toolCallId);
            return internals.run([input], first);
        },
        [APPROVAL]: approval,
    };
    return made;
}
/**
 * The `toolApproval` setting of `generateText` / `streamText` for a tool set: oncegate's
 * approval function for each tool made by `oncegateTool` (the others are left to their
 * own settings). Unlike the tool's boolean `needsApproval`, it turns a deny into the
 * SDK's `execution-denied` with the deny's line as the reason.
 */
export function toolApproval(tools) {
    const out = {};
    for (const [name, tool] of Object.entries(tools)) {
        const approval = tool?.[APPROVAL];
        if (approval !== undefined)
            out[name] = approval;
    }
    return out;
}
/**
 * The tool message that resumes a run stopped on approval requests, answering each with
 * `approved: true`: oncegate's decision stands (the approval function asks the gateway
 * again when the run resumes). Append it after the stopped run's `responseMessages`.
 */
export function deferToOncegate(content) {
    const parts = content
        .filter((p) => p.type === "tool-approval-request" && typeof p.approvalId === "string")
        .map((p) => ({ type: "tool-approval-response", approvalId: p.approvalId, approved: true }));
    return { role: "tool", content: parts };
}

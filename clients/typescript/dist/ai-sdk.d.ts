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
import type { FlexibleSchema, Tool } from "ai";
import { type JsonObject } from "./models.js";
/** Options of `oncegateTool`: what the model is told about the tool. */
export interface OncegateToolOptions<I> {
    /** What the tool does, for the model. */
    description?: string;
    /** The input's schema (`z.object({...})`, `jsonSchema(...)`): the capability arguments. */
    inputSchema: FlexibleSchema<I>;
}
/** What oncegate's approval function answers (a subset of the SDK's `ToolApprovalStatus`). */
export type OncegateApprovalStatus = {
    type: "not-applicable";
} | {
    type: "user-approval";
    reason: string;
} | {
    type: "denied";
    reason: string;
};
/** The approval function `oncegateTool` attaches, as `toolApproval` takes it per tool. */
export type OncegateApproval<I> = (input: I, options: {
    toolCallId: string;
}) => Promise<OncegateApprovalStatus>;
declare const APPROVAL: unique symbol;
/** A tool made by `oncegateTool`: an AI SDK tool that also carries its approval function. */
export type OncegateTool<I, R> = Tool<I, R> & {
    readonly [APPROVAL]: OncegateApproval<I>;
};
/**
 * An AI SDK tool that runs `fn` (a `gate.protect(...)` function taking the tool's input
 * object) at most once per intent, with oncegate's holds as the SDK's approvals.
 */
export declare function oncegateTool<I extends JsonObject, R>(fn: (input: I) => Promise<R>, options: OncegateToolOptions<I>): OncegateTool<I, R>;
/**
 * The `toolApproval` setting of `generateText` / `streamText` for a tool set: oncegate's
 * approval function for each tool made by `oncegateTool` (the others are left to their
 * own settings). Unlike the tool's boolean `needsApproval`, it turns a deny into the
 * SDK's `execution-denied` with the deny's line as the reason.
 */
export declare function toolApproval(tools: Record<string, unknown>): Record<string, OncegateApproval<never>>;
/** A `tool-approval-request` part, as `generateText`'s `content` holds it. */
export interface ApprovalRequestPart {
    type: string;
    approvalId?: string;
}
/**
 * The tool message that resumes a run stopped on approval requests, answering each with
 * `approved: true`: oncegate's decision stands (the approval function asks the gateway
 * again when the run resumes). Append it after the stopped run's `responseMessages`.
 */
export declare function deferToOncegate(content: readonly ApprovalRequestPart[]): {
    role: "tool";
    content: {
        type: "tool-approval-response";
        approvalId: string;
        approved: true;
    }[];
};
export {};

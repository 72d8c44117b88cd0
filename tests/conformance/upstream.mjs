// The upstream the conformance run fronts: an MCP server (the TypeScript SDK, Streamable
// HTTP, sessions) with the tools, resources and prompts the official conformance suite's
// server scenarios call, written here from the scenarios' own descriptions. oncegate
// sits in front of it (tests/conformance/oncegate.toml) and the suite talks only to
// oncegate, so what the suite sees is what the gateway passes on.
//
//   node upstream.mjs            prints "upstream listening on http://127.0.0.1:PORT/mcp"

import http from "node:http";
import { randomUUID } from "node:crypto";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import {
  CallToolRequestSchema,
  CompleteRequestSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  ReadResourceRequestSchema,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
  CreateMessageResultSchema,
  ElicitResultSchema,
} from "@modelcontextprotocol/sdk/types.js";

// A 1x1 red PNG and a tiny WAV header, base64.
const PNG =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const noArgs = { type: "object", properties: {} };
const readOnly = { readOnlyHint: true };

const tools = [
  { name: "test_simple_text", description: "Returns simple text", inputSchema: noArgs, annotations: readOnly },
  { name: "test_image_content", description: "Returns an image", inputSchema: noArgs, annotations: readOnly },
  { name: "test_audio_content", description: "Returns audio", inputSchema: noArgs, annotations: readOnly },
  { name: "test_embedded_resource", description: "Returns an embedded resource", inputSchema: noArgs, annotations: readOnly },
  { name: "test_multiple_content_types", description: "Returns text, an image and a resource", inputSchema: noArgs, annotations: readOnly },
  { name: "test_tool_with_logging", description: "Logs three messages while it runs", inputSchema: noArgs, annotations: readOnly },
  { name: "test_tool_with_progress", description: "Reports progress while it runs", inputSchema: noArgs, annotations: readOnly },
  { name: "test_error_handling", description: "Always fails", inputSchema: noArgs, annotations: readOnly },
  {
    name: "test_sampling",
    description: "Asks the client's model",
    inputSchema: { type: "object", properties: { prompt: { type: "string" } }, required: ["prompt"] },
  },
  {
    name: "test_elicitation",
    description: "Asks the client's user",
    inputSchema: { type: "object", properties: { message: { type: "string" } }, required: ["message"] },
  },
  { name: "test_elicitation_sep1034_defaults", description: "Asks the user, with defaults", inputSchema: noArgs },
  { name: "test_elicitation_sep1330_enums", description: "Asks the user, with enums", inputSchema: noArgs },
  {
    name: "json_schema_2020_12_tool",
    description: "Tool with JSON Schema 2020-12 features",
    annotations: readOnly,
    inputSchema: {
      $schema: "https://json-schema.org/draft/2020-12/schema",
      type: "object",
      $defs: {
        address: { type: "object", properties: { street: { type: "string" }, city: { type: "string" } } },
      },
      properties: { name: { type: "string" }, address: { $ref: "#/$defs/address" } },
      additionalProperties: false,
    },
  },
];

function newServer() {
  const server = new Server(
    { name: "oncegate-conformance-upstream", version: "1.0.0" },
    { capabilities: { tools: {}, resources: { subscribe: true }, prompts: {}, logging: {}, completions: {} } },
  );
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    const log = (data) =>
      server.notification(
        { method: "notifications/message", params: { level: "info", data } },
        { relatedRequestId: extra.requestId },
      );
    const progressToken = req.params._meta?.progressToken;
    switch (req.params.name) {
      case "test_simple_text":
        return { content: [{ type: "text", text: "This is a simple text response for testing." }] };
      case "test_image_content":
        return { content: [{ type: "image", data: PNG, mimeType: "image/png" }] };
      case "test_audio_content":
        return { content: [{ type: "audio", data: WAV, mimeType: "audio/wav" }] };
      case "test_embedded_resource":
        return {
          content: [
            {
              type: "resource",
              resource: { uri: "test://embedded-resource", mimeType: "text/plain", text: "This is an embedded resource content." },
            },
          ],
        };
      case "test_multiple_content_types":
        return {
          content: [
            { type: "text", text: "Multiple content types test:" },
            { type: "image", data: PNG, mimeType: "image/png" },
            {
              type: "resource",
              resource: { uri: "test://mixed-content-resource", mimeType: "application/json", text: '{"test":"data","value":123}' },
            },
          ],
        };
      case "test_tool_with_logging":
        await log("Tool execution started");
        await sleep(50);
        await log("Tool processing data");
        await sleep(50);
        await log("Tool execution completed");
        return { content: [{ type: "text", text: "Tool with logging executed successfully" }] };
      case "test_tool_with_progress":
        for (const progress of [0, 50, 100]) {
          if (progressToken !== undefined) {
            await server.notification(
              { method: "notifications/progress", params: { progressToken, progress, total: 100 } },
              { relatedRequestId: extra.requestId },
            );
          }
          if (progress < 100) await sleep(50);
        }
        return { content: [{ type: "text", text: "Tool with progress executed successfully" }] };
      case "test_error_handling":
        return { isError: true, content: [{ type: "text", text: "This tool intentionally returns an error for testing" }] };
      case "test_sampling": {
        const r = await server.request(
          {
            method: "sampling/createMessage",
            params: { messages: [{ role: "user", content: { type: "text", text: req.params.arguments.prompt } }], maxTokens: 100 },
          },
          CreateMessageResultSchema,
          { relatedRequestId: extra.requestId },
        );
        return { content: [{ type: "text", text: `LLM response: ${r.content.text}` }] };
      }
      case "test_elicitation":
      case "test_elicitation_sep1034_defaults":
      case "test_elicitation_sep1330_enums": {
        const r = await server.request(
          {
            method: "elicitation/create",
            params: {
              message: req.params.arguments?.message ?? "Please answer",
              requestedSchema: { type: "object", properties: { username: { type: "string" } } },
            },
          },
          ElicitResultSchema,
          { relatedRequestId: extra.requestId },
        );
        return { content: [{ type: "text", text: `User response: ${JSON.stringify(r)}` }] };
      }
      case "json_schema_2020_12_tool":
        return { content: [{ type: "text", text: `Hello, ${req.params.arguments?.name ?? "nobody"}` }] };
      default:
        throw new Error(`Unknown tool: ${req.params.name}`);
    }
  });

  server.setRequestHandler(ListResourcesRequestSchema, async () => ({
    resources: [
      { uri: "test://static-text", name: "static-text", description: "A static text resource", mimeType: "text/plain" },
      { uri: "test://static-binary", name: "static-binary", description: "A static binary resource", mimeType: "image/png" },
      { uri: "test://watched-resource", name: "watched-resource", description: "A resource to subscribe to", mimeType: "text/plain" },
    ],
  }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [
      { uriTemplate: "test://template/{id}/data", name: "template", description: "Data by id", mimeType: "application/json" },
    ],
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (req) => {
    const uri = req.params.uri;
    if (uri === "test://static-text" || uri === "test://watched-resource")
      return { contents: [{ uri, mimeType: "text/plain", text: "This is the content of the static text resource." }] };
    if (uri === "test://static-binary") return { contents: [{ uri, mimeType: "image/png", blob: PNG }] };
    const m = /^test:\/\/template\/([^/]+)\/data$/.exec(uri);
    if (m)
      return {
        contents: [{ uri, mimeType: "application/json", text: JSON.stringify({ id: m[1], templateTest: true, data: `Data for ID: ${m[1]}` }) }],
      };
    throw new Error(`Resource not found: ${uri}`);
  });
  server.setRequestHandler(SubscribeRequestSchema, async () => ({}));
  server.setRequestHandler(UnsubscribeRequestSchema, async () => ({}));

  server.setRequestHandler(ListPromptsRequestSchema, async () => ({
    prompts: [
      { name: "test_simple_prompt", description: "A simple prompt" },
      {
        name: "test_prompt_with_arguments",
        description: "A prompt with arguments",
        arguments: [
          { name: "arg1", description: "First argument", required: true },
          { name: "arg2", description: "Second argument", required: true },
        ],
      },
      {
        name: "test_prompt_with_embedded_resource",
        description: "A prompt with an embedded resource",
        arguments: [{ name: "resourceUri", description: "The resource to embed", required: true }],
      },
      { name: "test_prompt_with_image", description: "A prompt with an image" },
    ],
  }));
  server.setRequestHandler(GetPromptRequestSchema, async (req) => {
    const a = req.params.arguments ?? {};
    switch (req.params.name) {
      case "test_simple_prompt":
        return { messages: [{ role: "user", content: { type: "text", text: "This is a simple prompt for testing." } }] };
      case "test_prompt_with_arguments":
        return {
          messages: [{ role: "user", content: { type: "text", text: `Prompt with arguments: arg1='${a.arg1}', arg2='${a.arg2}'` } }],
        };
      case "test_prompt_with_embedded_resource":
        return {
          messages: [
            {
              role: "user",
              content: { type: "resource", resource: { uri: a.resourceUri, mimeType: "text/plain", text: "Embedded resource content for testing." } },
            },
            { role: "user", content: { type: "text", text: "Please process the embedded resource above." } },
          ],
        };
      case "test_prompt_with_image":
        return {
          messages: [
            { role: "user", content: { type: "image", data: PNG, mimeType: "image/png" } },
            { role: "user", content: { type: "text", text: "Please analyze the image above." } },
          ],
        };
      default:
        throw new Error(`Unknown prompt: ${req.params.name}`);
    }
  });
  server.setRequestHandler(CompleteRequestSchema, async () => ({ completion: { values: [], hasMore: false } }));
  server.setRequestHandler(SetLevelRequestSchema, async () => ({}));
  return server;
}

const sessions = new Map();

async function body(req) {
  let text = "";
  for await (const chunk of req) text += chunk;
  return text ? JSON.parse(text) : undefined;
}

const httpServer = http.createServer(async (req, res) => {
  try {
    const id = req.headers["mcp-session-id"];
    const parsed = req.method === "POST" ? await body(req) : undefined;
    let transport = id ? sessions.get(id) : undefined;
    if (!transport) {
      if (id || parsed?.method !== "initialize") {
        res.writeHead(id ? 404 : 400, { "content-type": "application/json" });
        res.end(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32000, message: "no such session" } }));
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (sid) => sessions.set(sid, transport),
      });
      transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
      await newServer().connect(transport);
    }
    await transport.handleRequest(req, res, parsed);
  } catch (e) {
    if (!res.headersSent) res.writeHead(500);
    res.end(String(e));
  }
});

httpServer.listen(0, "127.0.0.1", () => {
  console.log(`upstream listening on http://127.0.0.1:${httpServer.address().port}/mcp`);
});

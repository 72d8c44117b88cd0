//! The sandbox's MCP tool catalogue: every tool's name, description, annotations and
//! input schema, as `tools/list` answers them (the handlers are in `super`).

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::tool_call::ToolCall;
use crate::provider::MAX_EFFECTS_PAGE;
use crate::resource::Resource;

/// Every tool the sandbox offers, creates first.
pub(super) fn catalogue() -> Vec<Tool> {
    let creates = Resource::ALL.into_iter().map(|resource| {
        let (title, description, schema) = match resource {
            Resource::Charges => (
                "Create a charge",
                "Charge an order (POST /v1/charges). Amounts are in minor units.",
                money_schema(),
            ),
            Resource::Refunds => (
                "Create a refund",
                "Refund (part of) an order (POST /v1/refunds). Amounts are in minor units.",
                money_schema(),
            ),
            Resource::Emails => (
                "Send an email",
                "Send a templated email about an order (POST /v1/emails).",
                email_schema(),
            ),
            Resource::Ledger => (
                "Append a ledger entry",
                "Append any JSON object to the ledger (POST /v1/ledger).",
                ledger_schema(),
            ),
        };
        let description = format!(
            "{description} With an idempotency key (argument or \
             _meta[\"dev.oncegate/idempotency_key\"]) a repeat answers the first result and \
             commits nothing; the same key with other arguments is idempotency_key_reused."
        );
        Tool::new(ToolCall::create_name(resource), description, schema)
            .with_title(title)
            .with_annotations(
                ToolAnnotations::with_title(title)
                    .read_only(false)
                    .destructive(false)
                    .idempotent(false),
            )
    });
    let finds = Resource::ALL.into_iter().map(|resource| {
        let (title, noun) = match resource {
            Resource::Charges => ("Find a charge", "a charge"),
            Resource::Refunds => ("Find a refund", "a refund"),
            Resource::Emails => ("Find an email", "an email"),
            Resource::Ledger => ("Find a ledger entry", "a ledger entry"),
        };
        let criteria = match resource {
            Resource::Emails => "idempotency_key, order_id or dedupe_ref",
            _ => "idempotency_key or order_id",
        };
        let description = format!(
            "Look up {noun} by {criteria}; every one given must match (GET {path}). Answers \
             {{\"found\":true,\"{field}\":{{..}}}} with the first match, or {{\"found\":false}}.",
            path = resource.path(),
            field = resource.lookup_field(),
        );
        Tool::new(
            ToolCall::find_name(resource),
            description,
            find_schema(resource),
        )
        .with_title(title)
        .with_annotations(ToolAnnotations::with_title(title).read_only(true))
    });
    let get_order = Tool::new(
        ToolCall::GET_ORDER,
        "The charges and refunds of an order (GET /v1/orders/{order_id}).",
        object_schema(
            json!({ "order_id": { "type": "string", "minLength": 1 } }),
            &["order_id"],
            false,
        ),
    )
    .with_title("Get an order")
    .with_annotations(ToolAnnotations::with_title("Get an order").read_only(true));
    let list_effects = Tool::new(
        ToolCall::LIST_EFFECTS,
        "Every effect the provider committed, whichever surface committed it, in commit \
         (seq) order (GET /v1/effects); every filter given must match. Page with limit, \
         then after = the answer's next until next is null. Answers \
         {\"effects\":[{seq, kind, id, order_id, amount_minor, currency, idempotency_key, \
         at, request}..],\"next\":seq|null}.",
        effects_schema(),
    )
    .with_title("List effects")
    .with_annotations(ToolAnnotations::with_title("List effects").read_only(true));

    creates
        .chain(finds)
        .chain([get_order, list_effects])
        .collect()
}

fn key_property() -> Value {
    json!({
        "type": "string",
        "minLength": 1,
        "maxLength": 255,
        "description": "Names this create: a repeat with the same key is not a new effect.",
    })
}

fn money_schema() -> Arc<JsonObject> {
    object_schema(
        json!({
            "order_id": { "type": "string", "minLength": 1 },
            "amount_minor": {
                "type": "integer",
                "minimum": 1,
                "description": "The amount in minor units (cents for USD).",
            },
            "currency": {
                "type": "string",
                "pattern": "^[A-Za-z]{3}$",
                "description": "ISO 4217 code.",
            },
            "memo": { "type": "string" },
            "idempotency_key": key_property(),
        }),
        &["order_id", "amount_minor", "currency"],
        true,
    )
}

fn email_schema() -> Arc<JsonObject> {
    object_schema(
        json!({
            "order_id": { "type": "string", "minLength": 1 },
            "to": { "type": "string", "minLength": 1 },
            "template": { "type": "string", "minLength": 1 },
            "body": { "type": "string" },
            "dedupe_ref": {
                "type": "string",
                "description": "A reference of the caller's that find_email can find it by.",
            },
            "idempotency_key": key_property(),
        }),
        &["order_id", "to", "template"],
        true,
    )
}

fn ledger_schema() -> Arc<JsonObject> {
    object_schema(
        json!({
            "order_id": { "type": "string" },
            "amount_minor": { "type": "integer" },
            "currency": { "type": "string" },
            "idempotency_key": key_property(),
        }),
        &[],
        true,
    )
}

fn find_schema(resource: Resource) -> Arc<JsonObject> {
    let mut properties = json!({
        "idempotency_key": { "type": "string", "minLength": 1 },
        "order_id": { "type": "string", "minLength": 1 },
    });
    if resource == Resource::Emails
        && let Some(properties) = properties.as_object_mut()
    {
        properties.insert(
            "dedupe_ref".to_owned(),
            json!({ "type": "string", "minLength": 1 }),
        );
    }
    let mut schema = object_schema(properties, &[], false);
    Arc::make_mut(&mut schema).insert("minProperties".to_owned(), json!(1));
    schema
}

fn effects_schema() -> Arc<JsonObject> {
    object_schema(
        json!({
            "kind": { "type": "string", "enum": ["charge", "refund", "email", "ledger"] },
            "order_id": { "type": "string", "minLength": 1 },
            "idempotency_key": {
                "type": "string",
                "minLength": 1,
                "description": "The key as sent, whether or not the provider honoured it.",
            },
            "since": {
                "type": "string",
                "format": "date-time",
                "description": "RFC 3339: only effects committed at or after it.",
            },
            "after": {
                "type": "integer",
                "minimum": 0,
                "description": "Only effects with a greater seq: the next of the page before.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_EFFECTS_PAGE,
                "description": format!(
                    "At most this many effects (default {MAX_EFFECTS_PAGE} once after is \
                     given; with neither, every one)."
                ),
            },
        }),
        &[],
        false,
    )
}

/// A JSON Schema object. Creates tolerate unknown fields (and keep them in the stored
/// body), as the HTTP API does; lookups refuse them, so a misspelt criterion is not
/// silently dropped.
fn object_schema(properties: Value, required: &[&str], open: bool) -> Arc<JsonObject> {
    let mut schema = JsonObject::new();
    schema.insert("type".to_owned(), json!("object"));
    schema.insert("properties".to_owned(), properties);
    if !required.is_empty() {
        schema.insert("required".to_owned(), json!(required));
    }
    schema.insert("additionalProperties".to_owned(), json!(open));
    Arc::new(schema)
}

//! Tool descriptions from the registry: input schemas derived from the key recipe and
//! the templates, and MCP annotations from the category (never from the upstream).
//!
//! Derived schemas are portable: one `type` per property and every property typed (no
//! type arrays, no untyped properties), which strict clients (the Inspector's
//! `--strict`, Gemini-style schema subsets) require. Where the gateway accepts several
//! spellings (an amount as `"12.50"`, `12.5` or `{"minor": 1250}`), the schema names the
//! exact one (a decimal string) and the description the others.

use oncegate_core::config::{Capability, Category};
use oncegate_core::normalise::Normaliser;
use oncegate_core::template::Source;
use rmcp::model::{JsonObject, ToolAnnotations};
use serde_json::{Map, Value, json};

/// What the category promises, as MCP hints (from the registry, never from upstream).
pub(crate) fn annotations(cap: &Capability) -> ToolAnnotations {
    let (read_only, destructive, idempotent) = match cap.category {
        Category::Read => (true, false, true),
        Category::IdempotentWrite => (false, true, true),
        // The upstream dedupes the intent key, inside the replay window or not.
        Category::Keyed => (false, true, true),
        // oncegate replays repeats inside the window, but after it the provider, which
        // cannot dedupe, would act again: not idempotent in MCP's sense.
        Category::NonIdempotent => (false, true, false),
    };
    let mut a = ToolAnnotations::new()
        .read_only(read_only)
        .destructive(destructive)
        .idempotent(idempotent);
    a.open_world_hint = Some(true);
    a
}

fn arg_schema(normaliser: &Normaliser) -> Value {
    match normaliser {
        Normaliser::Money { .. } => json!({
            "type": "string",
            "description": "an amount as a decimal string, e.g. \"12.50\" (also accepted: 12.5, \"USD 12.50\", {\"minor\": 1250})"
        }),
        Normaliser::Email => json!({"type": "string", "format": "email"}),
        Normaliser::Text { .. } => json!({"type": "string"}),
        Normaliser::Integer => json!({"type": "integer"}),
        Normaliser::Decimal => json!({
            "type": "string",
            "description": "a decimal number as a string, e.g. \"2.5\" (a JSON number is accepted too)"
        }),
        Normaliser::Enum { values } => json!({"type": "string", "enum": values}),
        Normaliser::Set => json!({"type": "array", "items": {"type": "string"}}),
        Normaliser::Id { .. } => json!({
            "type": "string",
            "description": "an identifier (an integer is accepted too)"
        }),
        // Only fronted tools' keys use it, and they show the upstream's own schema.
        Normaliser::Json => json!({"type": "string", "description": "any JSON value"}),
    }
}

/// A schema built from the key recipe and the templates: what the gateway reads.
pub fn derived_schema(cap: &Capability) -> JsonObject {
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut add = |root: &str, nested: bool, schema: Value, is_required: bool| {
        if !properties.contains_key(root) {
            let schema = if nested {
                json!({"type": "object"})
            } else {
                schema
            };
            properties.insert(root.to_owned(), schema);
        }
        if is_required && !required.contains(&Value::from(root)) {
            required.push(Value::from(root));
        }
    };
    if let Some(path) = &cap.key.business_ref {
        let nested = path.as_str().contains('.');
        add(
            path.root(),
            nested,
            json!({"type": "string", "description": "the business reference: one intent per value (an integer is accepted too)"}),
            true,
        );
    }
    for arg in &cap.key.significant {
        let nested = arg.path.as_str().contains('.');
        add(
            arg.path.root(),
            nested,
            arg_schema(&arg.normaliser),
            !arg.optional,
        );
        if let Normaliser::Money {
            currency_arg: Some(c),
            default_currency,
            ..
        } = &arg.normaliser
        {
            add(
                c.root(),
                c.as_str().contains('.'),
                json!({"type": "string", "description": "ISO 4217 currency code"}),
                default_currency.is_none() && !arg.optional,
            );
        }
    }
    // Arguments only passed through to the provider (a memo, a body): optional.
    let mut templates = Vec::new();
    if let Some(up) = &cap.upstream {
        templates.push(&up.url);
        if let Some(body) = &up.body {
            body.templates(&mut templates);
        }
    }
    for t in templates {
        for part in t.parts() {
            if let oncegate_core::template::Part::Placeholder(Source::Arg(path)) = part {
                add(
                    path.root(),
                    path.as_str().contains('.'),
                    json!({"type": "string", "description": "passed to the provider as given; not part of the intent"}),
                    false,
                );
            }
        }
    }
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        schema.insert("required".into(), Value::Array(required));
    }
    schema
}

/// Removes a property (and its `required` entry) from a schema.
pub(crate) fn strip_property(schema: &mut JsonObject, name: &str) {
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        props.remove(name);
    }
    if let Some(Value::Array(required)) = schema.get_mut("required") {
        required.retain(|r| r.as_str() != Some(name));
    }
}

/// Every offered tool's `outputSchema`: an object whose `oncegate` field is the outcome
/// ([`crate::wire::Envelope::structured`]); the upstream's own fields are allowed beside
/// it (or its whole value under `result`), so every answer validates, a replay of a
/// result stored before the field existed included (the field is added when answering).
pub fn output_schema() -> JsonObject {
    let outcome = json!({
        "type": "object",
        "description": "What oncegate did with this call. Read `message` and follow it: when `do_not_call_again` is true, do not call this tool again for this intent.",
        "properties": {
            "status": {
                "type": "string",
                "description": "applied, replayed (already done earlier: nothing new happened), in_flight, unknown, pending_approval, denied, refused, dry_run, failed"
            },
            "message": {
                "type": "string",
                "description": "The one line to act on (the first text block of `content`)."
            },
            "do_not_call_again": {
                "type": "boolean",
                "description": "True when `message` says not to call again: a repeat would only replay, wait or be refused."
            },
            "intent_key": {"type": "string", "description": "The intent this call resolved to."},
            "approval_id": {"type": "string", "description": "The approval holding the call."}
        },
        "required": ["status", "message", "do_not_call_again"]
    });
    let key = crate::wire::OUTCOME_STRUCTURED_KEY;
    Map::from_iter([
        ("type".to_owned(), json!("object")),
        ("properties".to_owned(), json!({ key: outcome })),
        ("required".to_owned(), json!([key])),
        ("additionalProperties".to_owned(), json!(true)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What strict clients check: every property has exactly one `type`, a string.
    fn portable(schema: &Value, at: &str) {
        let ty = schema.get("type");
        assert!(
            ty.is_some_and(Value::is_string),
            "{at}: `type` must be one string: {schema}"
        );
        if let Some(Value::Object(props)) = schema.get("properties") {
            for (name, p) in props {
                portable(p, &format!("{at}.{name}"));
            }
        }
        if let Some(items) = schema.get("items") {
            portable(items, &format!("{at}[]"));
        }
    }

    #[test]
    fn every_derived_schema_of_the_example_is_portable() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/payments.toml");
        let registry = oncegate_engine::config::load_registry(&path).unwrap();
        assert!(!registry.capabilities().is_empty());
        for cap in registry.capabilities() {
            portable(&Value::Object(derived_schema(cap)), &cap.name);
        }
        for n in [
            Normaliser::Integer,
            Normaliser::Decimal,
            Normaliser::Set,
            Normaliser::Email,
        ] {
            portable(&arg_schema(&n), "arg");
        }
    }
}

//! Intent keys: derived by oncegate from validated, normalised inputs and structural
//! state, never from the model.
//!
//! key = SHA-256 over the RFC 8785 canonical JSON of
//! `{v, tenant, principal?, capability, business_ref, args, scope}`. Attempt numbers,
//! timestamps, tool-use ids, request text and undeclared arguments never enter it.

use std::fmt;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::config::{Capability, KeyPrincipal, KeyRecipe, Scope};
use crate::normalise::{ArgPath, Folding, NormaliseError, Normaliser, clean_text};

// Their home before `canonical` existed; other crates still name them here.
pub use crate::canonical::{canonical_json, canonical_json_of, digest};

/// Version of the key material layout. Changing it changes every key: never do it
/// without a migration plan (the snapshot tests pin it).
pub const KEY_VERSION: u32 = 1;

/// A SHA-256 intent key, lowercase hex.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IntentKey(String);

impl IntentKey {
    /// Wraps a hex string read back from a store.
    pub fn from_hex(hex: impl Into<String>) -> Self {
        Self(hex.into())
    }

    /// The hex string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn of(material: &Value) -> Self {
        Self::of_canonical(&canonical_json(material))
    }

    fn of_canonical(canonical: &str) -> Self {
        Self(hex::encode(Sha256::digest(canonical.as_bytes())))
    }
}

impl fmt::Display for IntentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// SHA-256 hex of every argument of a call as the upstream is sent it (their canonical
/// JSON, not only the key's): what an approval is bound to. Two spellings of one JSON
/// value (key order, `1.0` and `1`) are one digest; any changed, added or removed
/// argument is another.
pub fn sent_digest(arguments: &Value) -> String {
    digest(&serde_json::json!({ "sent": arguments }))
}

/// The structural inputs of one call, from the orchestrator (never from arguments).
#[derive(Clone, Debug, Default)]
pub struct CallScope<'a> {
    /// `Oncegate-Run-Id` / `_meta["dev.oncegate/run_id"]`.
    pub run_id: Option<&'a str>,
    /// `Oncegate-Step-Id` / `_meta["dev.oncegate/step_id"]`.
    pub step_id: Option<&'a str>,
}

/// Why a key could not be derived.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The arguments are not a JSON object.
    #[error("arguments must be a JSON object")]
    NotAnObject,
    /// The declared business reference is missing.
    #[error("the business reference `{0}` is missing from the arguments")]
    MissingBusinessRef(String),
    /// The business reference is not a string or an integer.
    #[error("the business reference `{path}` must be a string or an integer, got {got}")]
    BadBusinessRef {
        /// The declared path.
        path: String,
        /// What was found.
        got: String,
    },
    /// A required significant argument is missing.
    #[error("the significant argument `{0}` is missing")]
    MissingArgument(String),
    /// A significant argument did not normalise.
    #[error("argument `{path}`: {source}")]
    Invalid {
        /// The argument.
        path: String,
        /// Why.
        source: NormaliseError,
    },
}

/// One input that entered the key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyInput {
    /// The argument path.
    pub arg: String,
    /// The normaliser applied.
    pub normaliser: String,
    /// The value as the caller sent it (null when absent).
    pub raw: Value,
    /// The value that entered the key.
    pub normalised: Value,
    /// What Unicode cleaning changed ("stripped U+200B ZERO WIDTH SPACE", "NFC changed
    /// the text"); absent when nothing changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
}

/// Which inputs made a key and why: what `oncegate keys derive` prints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyExplanation {
    /// The key.
    pub key: IntentKey,
    /// The key without its run part (run and step scopes), for cross-run detection.
    pub cross_run_key: Option<IntentKey>,
    /// The exact canonical JSON that was hashed.
    pub material: String,
    /// The tenant.
    pub tenant: String,
    /// The capability.
    pub capability: String,
    /// The principal, and whether it entered the key.
    pub principal: String,
    /// `true` when the capability sets `key_principal = "principal"`.
    pub principal_in_key: bool,
    /// The business reference's path and normalised value.
    pub business_ref: Option<KeyInput>,
    /// The significant arguments.
    pub inputs: Vec<KeyInput>,
    /// The scope and its value.
    pub scope: Value,
    /// Notes (fallbacks taken).
    pub notes: Vec<String>,
    /// Top-level arguments that did not enter the key.
    pub ignored: Vec<String>,
}

/// A derived key with what decide() and policy need.
#[derive(Clone, Debug, PartialEq)]
pub struct DerivedKey {
    /// The intent key.
    pub key: IntentKey,
    /// See [`KeyExplanation::cross_run_key`].
    pub cross_key: Option<IntentKey>,
    /// The normalised business reference.
    pub business_ref: Option<String>,
    /// Normalised significant arguments by declared path.
    pub normalised: Map<String, Value>,
    /// SHA-256 of `{business_ref, args}`: approvals are bound to it.
    pub args_digest: String,
    /// The explanation.
    pub explanation: KeyExplanation,
}

/// The normalised business reference and significant arguments of `arguments`, as a
/// call's would be: what detection compares an upstream effect (that never passed
/// through oncegate) with intents by.
pub fn normalise_arguments(
    capability: &Capability,
    arguments: &Value,
) -> Result<(Option<String>, Map<String, Value>), KeyError> {
    // The scope and time enter the key only, never the normalised values.
    let scope = CallScope {
        run_id: Some("detect"),
        step_id: Some("detect"),
    };
    let d = derive(
        "",
        "",
        capability,
        arguments,
        &scope,
        Timestamp::UNIX_EPOCH,
        &TimeZone::UTC,
    )?;
    Ok((d.business_ref, d.normalised))
}

/// Derives the intent key of a call.
///
/// `now` and `tz` only matter for `day` scopes; they are injected, never read.
pub fn derive(
    tenant: &str,
    principal: &str,
    capability: &Capability,
    arguments: &Value,
    scope: &CallScope<'_>,
    now: Timestamp,
    tz: &TimeZone,
) -> Result<DerivedKey, KeyError> {
    let Value::Object(top) = arguments else {
        return Err(KeyError::NotAnObject);
    };
    let recipe = &capability.key;
    let business_ref = recipe
        .business_ref
        .as_ref()
        .map(|path| business_ref_input(path, arguments))
        .transpose()?;
    let Inputs {
        normalised,
        inputs,
        used_roots,
    } = argument_inputs(recipe, top, arguments)?;
    let mut notes = Vec::new();
    let (scope_value, cross_scope) = scope_material(recipe.scope, scope, now, tz, &mut notes);

    let principal_in_key = capability.key_principal == KeyPrincipal::Principal;
    let business_value = business_ref
        .as_ref()
        .map(|b| b.normalised.clone())
        .unwrap_or(Value::Null);
    let mut material = json!({
        "v": KEY_VERSION,
        "tenant": tenant,
        "capability": capability.name,
        "business_ref": business_value,
        "args": Value::Object(normalised.clone()),
        "scope": scope_value,
    });
    if principal_in_key {
        material["principal"] = Value::String(principal.to_owned());
    }
    // Canonicalised once: the key hashes it and the explanation shows it.
    let canonical = canonical_json(&material);
    let key = IntentKey::of_canonical(&canonical);
    let cross_key = cross_scope.map(|s| {
        let mut m = material.clone();
        m["scope"] = s;
        IntentKey::of(&m)
    });
    let args_digest =
        digest(&json!({"business_ref": business_value, "args": Value::Object(normalised.clone())}));

    let mut ignored: Vec<String> = top
        .keys()
        .filter(|k| !used_roots.contains(&k.as_str()))
        .cloned()
        .collect();
    ignored.sort();

    let explanation = KeyExplanation {
        key: key.clone(),
        cross_run_key: cross_key.clone(),
        material: canonical,
        tenant: tenant.to_owned(),
        capability: capability.name.clone(),
        principal: principal.to_owned(),
        principal_in_key,
        business_ref: business_ref.clone(),
        inputs,
        scope: material["scope"].clone(),
        notes,
        ignored,
    };
    Ok(DerivedKey {
        key,
        cross_key,
        business_ref: business_ref.map(|b| b.normalised.as_str().unwrap_or_default().to_owned()),
        normalised,
        args_digest,
        explanation,
    })
}

/// The business reference at `path`: a non-empty string (cleaned as an `id` is) or an
/// integer, never anything else.
fn business_ref_input(path: &ArgPath, arguments: &Value) -> Result<KeyInput, KeyError> {
    let raw = path
        .lookup(arguments)
        .ok_or_else(|| KeyError::MissingBusinessRef(path.to_string()))?;
    let mut changes = Vec::new();
    let cleaned = match raw {
        Value::String(s) => Some(clean_text(s, Folding::default(), &mut changes)),
        _ => None,
    };
    let value = match (raw, cleaned.as_deref().map(str::trim)) {
        (Value::String(_), Some(s)) if !s.is_empty() => s.to_owned(),
        (Value::Number(n), _) if n.is_i64() || n.is_u64() => n.to_string(),
        (other, _) => {
            return Err(KeyError::BadBusinessRef {
                path: path.to_string(),
                got: other.to_string(),
            });
        }
    };
    Ok(KeyInput {
        arg: path.to_string(),
        normaliser: "id".into(),
        raw: raw.clone(),
        normalised: Value::String(value),
        changes,
    })
}

/// The arguments that enter a key, normalised.
struct Inputs<'a> {
    /// Argument path to normalised value.
    normalised: Map<String, Value>,
    /// How each one was read, for the explanation.
    inputs: Vec<KeyInput>,
    /// The top-level arguments the recipe reads (the others are ignored).
    used_roots: Vec<&'a str>,
}

/// Normalises the recipe's significant arguments, in declaration order, then (for a
/// recipe that takes every argument) each other top-level argument as exact JSON.
fn argument_inputs<'a>(
    recipe: &'a KeyRecipe,
    top: &'a Map<String, Value>,
    arguments: &Value,
) -> Result<Inputs<'a>, KeyError> {
    let mut used_roots: Vec<&str> = Vec::new();
    if let Some(path) = &recipe.business_ref {
        used_roots.push(path.root());
    }
    let mut normalised = Map::new();
    let mut inputs = Vec::new();
    for arg in &recipe.significant {
        used_roots.push(arg.path.root());
        if let Normaliser::Money {
            currency_arg: Some(c),
            ..
        } = &arg.normaliser
        {
            used_roots.push(c.root());
        }
        let mut changes = Vec::new();
        let value = match arg.path.lookup(arguments) {
            Some(raw) => arg
                .normaliser
                .apply_noting(raw, arguments, &mut changes)
                .map_err(|source| KeyError::Invalid {
                    path: arg.path.to_string(),
                    source,
                })?,
            None if arg.optional => Value::Null,
            None => return Err(KeyError::MissingArgument(arg.path.to_string())),
        };
        inputs.push(KeyInput {
            arg: arg.path.to_string(),
            normaliser: arg.normaliser.type_name().into(),
            raw: arg.path.lookup(arguments).cloned().unwrap_or(Value::Null),
            normalised: value.clone(),
            changes,
        });
        normalised.insert(arg.path.to_string(), value);
    }

    if recipe.every_argument {
        // In argument-name order (the map's): the key does not depend on how the caller
        // ordered its arguments.
        for (name, raw) in top {
            if used_roots.contains(&name.as_str()) {
                continue;
            }
            let value = Normaliser::Json
                .apply_noting(raw, arguments, &mut Vec::new())
                .map_err(|source| KeyError::Invalid {
                    path: name.clone(),
                    source,
                })?;
            inputs.push(KeyInput {
                arg: name.clone(),
                normaliser: "json".into(),
                raw: raw.clone(),
                normalised: value.clone(),
                changes: Vec::new(),
            });
            normalised.insert(name.clone(), value);
        }
        used_roots.extend(top.keys().map(String::as_str));
    }
    Ok(Inputs {
        normalised,
        inputs,
        used_roots,
    })
}

/// The structural part of the key for `kind`, and the one its cross-run key takes
/// instead (run and step scopes only); what a reader should know goes to `notes`.
fn scope_material(
    kind: Scope,
    scope: &CallScope<'_>,
    now: Timestamp,
    tz: &TimeZone,
    notes: &mut Vec<String>,
) -> (Value, Option<Value>) {
    match kind {
        Scope::Global => (json!({"kind": "global"}), None),
        Scope::Day => {
            let date = now.to_zoned(tz.clone()).date();
            (json!({"kind": "day", "date": date.to_string()}), None)
        }
        Scope::Run | Scope::Step => {
            if scope.run_id.is_none() {
                notes.push(
                    "no run id was given: the key falls back to the replay window alone (never a random value)"
                        .to_owned(),
                );
            }
            let mut v = json!({"kind": if kind == Scope::Run { "run" } else { "step" }, "run": scope.run_id});
            if kind == Scope::Step {
                if scope.step_id.is_none() && scope.run_id.is_some() {
                    notes.push(
                        "no step id was given: the key is scoped to the run alone".to_owned(),
                    );
                }
                v["step"] = json!(scope.step_id);
            }
            (v, Some(json!({"kind": "any_run"})))
        }
    }
}

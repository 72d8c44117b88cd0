//! Cedar policy evaluation for capabilities.
//!
//! principal = `Agent::"name"` (with its `role`), action = `Action::"<capability>"`,
//! resource = `Tenant::"<tenant>"`, context = the normalised significant arguments
//! (money as minor-unit `Long` plus `<name>_currency`) and `business_ref`. Cedar answers
//! allow or deny; an `@oncegate("require_approval")` or `@oncegate("dry_run")` annotation
//! on any determining policy refines an allow. Policies are validated at load against a
//! schema generated from the registry, so a policy that names a context attribute the
//! capability does not have fails `check-config`.
//!
//! The compiled set itself ([`PolicyEngine`]) is `engine`, below the config model: a
//! capability holds it as data. Building it and evaluating a call read the capability,
//! so they are here, above the model.

use std::collections::HashMap;
use std::str::FromStr;

use cedar_policy::{
    ActionConstraint, Authorizer, Context, Decision, Entities, Entity, EntityId, EntityTypeName,
    EntityUid, PolicySet, Request, RestrictedExpression, Schema, ValidationMode, Validator,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::config::{Capability, Role};
use crate::normalise::Normaliser;

mod engine;

pub use engine::PolicyEngine;

use engine::Notes;

/// What policy says about one call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum PolicyVerdict {
    /// Go ahead.
    Allow,
    /// A human must approve first.
    RequireApproval {
        /// The determining policies that asked for approval.
        policies: Vec<String>,
    },
    /// Say what would happen; execute nothing.
    DryRun,
    /// No.
    Deny {
        /// Why (determining forbid policies, or "no permit matched").
        reason: String,
    },
}

/// The context attribute name for a significant argument path.
pub fn context_attr(path: &str) -> String {
    path.replace('.', "_")
}

/// The Cedar schema (human syntax) generated from the capabilities.
pub fn generate_schema(capabilities: &[&Capability]) -> String {
    let mut out = String::from("entity Agent = { role: String };\nentity Tenant;\n");
    for cap in capabilities {
        let mut attrs = vec!["business_ref?: String".to_owned()];
        for arg in &cap.key.significant {
            let name = context_attr(arg.path.as_str());
            let opt = if arg.optional { "?" } else { "" };
            match &arg.normaliser {
                Normaliser::Money { .. } => {
                    attrs.push(format!("\"{name}\"{opt}: Long"));
                    attrs.push(format!("\"{name}_currency\"{opt}: String"));
                }
                Normaliser::Integer => attrs.push(format!("\"{name}\"{opt}: Long")),
                Normaliser::Set => attrs.push(format!("\"{name}\"{opt}: Set<String>")),
                _ => attrs.push(format!("\"{name}\"{opt}: String")),
            }
        }
        out.push_str(&format!(
            "action \"{}\" appliesTo {{ principal: [Agent], resource: [Tenant], context: {{ {} }} }};\n",
            cap.name,
            attrs.join(", ")
        ));
    }
    out
}

impl PolicyEngine {
    /// Parses `text` and validates it (strict mode) against the capabilities' schema.
    pub fn new(text: &str, capabilities: &[&Capability]) -> Result<Self, String> {
        let schema_text = generate_schema(capabilities);
        let (schema, _warnings) = Schema::from_cedarschema_str(&schema_text)
            .map_err(|e| format!("generated schema is invalid: {e}"))?;
        let policies =
            PolicySet::from_str(text).map_err(|e| format!("cannot parse policies: {e}"))?;
        let result = Validator::new(schema.clone()).validate(&policies, ValidationMode::Strict);
        if !result.validation_passed() {
            let errors: Vec<String> = result.validation_errors().map(|e| e.to_string()).collect();
            return Err(format!(
                "policies do not validate against the registry's schema: {}",
                errors.join("; ")
            ));
        }
        for policy in policies.policies() {
            if let Some(value) = policy.annotation("oncegate")
                && !matches!(value, "require_approval" | "dry_run")
            {
                return Err(format!(
                    "policy {} has @oncegate(\"{value}\"); use \"require_approval\" or \"dry_run\"",
                    policy.id()
                ));
            }
        }
        let notes = policies
            .policies()
            .map(|policy| {
                let notes = Notes {
                    name: policy
                        .annotation("id")
                        .map_or_else(|| policy.id().to_string(), str::to_owned),
                    oncegate: policy.annotation("oncegate").map(str::to_owned),
                };
                (policy.id().clone(), notes)
            })
            .collect();
        let hash = hex::encode(Sha256::digest(text.as_bytes()));
        let type_name = |name: &str| {
            EntityTypeName::from_str(name).map_err(|e| format!("entity type {name}: {e}"))
        };
        let action_type = type_name("Action")?;
        let slices = capabilities
            .iter()
            .map(|cap| {
                let action =
                    EntityUid::from_type_name_and_id(action_type.clone(), EntityId::new(&cap.name));
                let slice = PolicySet::from_policies(
                    policies
                        .policies()
                        .filter(|p| can_apply(&p.action_constraint(), &action))
                        .cloned(),
                )
                .map_err(|e| format!("cannot slice the policies for {}: {e}", cap.name))?;
                Ok((cap.name.clone(), slice))
            })
            .collect::<Result<_, String>>()?;
        Ok(Self {
            policies,
            schema,
            hash,
            agent_type: type_name("Agent")?,
            action_type,
            tenant_type: type_name("Tenant")?,
            authorizer: Authorizer::new(),
            notes,
            slices,
        })
    }

    /// Evaluates one call. `normalised` is the key's normalised argument object.
    pub fn evaluate(
        &self,
        principal: &str,
        role: Role,
        tenant: &str,
        capability: &Capability,
        business_ref: Option<&str>,
        normalised: &Map<String, Value>,
    ) -> PolicyVerdict {
        match self.try_evaluate(
            principal,
            role,
            tenant,
            capability,
            business_ref,
            normalised,
        ) {
            Ok(verdict) => verdict,
            // Fail closed: a request Cedar cannot even evaluate is a denial.
            Err(e) => PolicyVerdict::Deny {
                reason: format!("policy evaluation failed: {e}"),
            },
        }
    }

    fn try_evaluate(
        &self,
        principal: &str,
        role: Role,
        tenant: &str,
        capability: &Capability,
        business_ref: Option<&str>,
        normalised: &Map<String, Value>,
    ) -> Result<PolicyVerdict, String> {
        // No policy can apply: Cedar's own answer (deny, nothing determining), without
        // building the request. A capability outside the slices (not in the registry
        // the set was built for) is evaluated against the whole set.
        let policies = match self.slices.get(&capability.name) {
            Some(slice) if slice.is_empty() => {
                return Ok(PolicyVerdict::Deny {
                    reason: "no policy permits this call".to_owned(),
                });
            }
            Some(slice) => slice,
            None => &self.policies,
        };
        let principal_uid =
            EntityUid::from_type_name_and_id(self.agent_type.clone(), EntityId::new(principal));
        let action = EntityUid::from_type_name_and_id(
            self.action_type.clone(),
            EntityId::new(&capability.name),
        );
        let resource =
            EntityUid::from_type_name_and_id(self.tenant_type.clone(), EntityId::new(tenant));
        // Built from typed values, not a JSON document Cedar would parse again; the
        // request below is still validated against the schema (a wrong type denies).
        let pairs = context_attrs(capability, business_ref, normalised)?
            .into_iter()
            .map(|(name, attr)| Ok((name, attr.expression()?)))
            .collect::<Result<Vec<_>, String>>()?;
        let context = Context::from_pairs(pairs).map_err(|e| e.to_string())?;
        let request = Request::new(
            principal_uid.clone(),
            action,
            resource,
            context,
            Some(&self.schema),
        )
        .map_err(|e| e.to_string())?;
        let attrs = HashMap::from([(
            "role".to_owned(),
            RestrictedExpression::new_string(role.as_str().to_owned()),
        )]);
        let agent =
            Entity::new(principal_uid, attrs, Default::default()).map_err(|e| e.to_string())?;
        let entities =
            Entities::from_entities([agent], Some(&self.schema)).map_err(|e| e.to_string())?;
        let response = self.authorizer.is_authorized(&request, policies, &entities);
        let determining: Vec<_> = response.diagnostics().reason().cloned().collect();
        if response.decision() == Decision::Deny {
            let reason = if determining.is_empty() {
                "no policy permits this call".to_owned()
            } else {
                let ids: Vec<String> = determining.iter().map(|id| self.name_of(id)).collect();
                format!("forbidden by policy {}", ids.join(", "))
            };
            return Ok(PolicyVerdict::Deny { reason });
        }
        let annotated = |want: &str| -> Vec<String> {
            determining
                .iter()
                .filter(|id| self.notes.get(*id).and_then(|n| n.oncegate.as_deref()) == Some(want))
                .map(|id| self.name_of(id))
                .collect()
        };
        if !annotated("dry_run").is_empty() {
            return Ok(PolicyVerdict::DryRun);
        }
        let approval = annotated("require_approval");
        if !approval.is_empty() {
            return Ok(PolicyVerdict::RequireApproval { policies: approval });
        }
        Ok(PolicyVerdict::Allow)
    }
}

/// Whether a policy scoped to `scope` can apply to `action`: the schema declares no
/// action groups, so `action in [...]` matches only the actions it lists.
fn can_apply(scope: &ActionConstraint, action: &EntityUid) -> bool {
    match scope {
        ActionConstraint::Any => true,
        ActionConstraint::Eq(a) => a == action,
        ActionConstraint::In(actions) => actions.contains(action),
    }
}

/// One context attribute, typed as [`generate_schema`] declares it.
enum Attr {
    Long(i64),
    Text(String),
    /// A normalised value as it came (a string for string-typed attributes, an array
    /// of strings for sets); anything else fails the evaluation closed.
    Value(Value),
}

impl Attr {
    fn expression(self) -> Result<RestrictedExpression, String> {
        let text = |v: &Value| {
            v.as_str()
                .map(|s| RestrictedExpression::new_string(s.to_owned()))
                .ok_or_else(|| format!("context value {v} is not a string"))
        };
        Ok(match self {
            Attr::Long(n) => RestrictedExpression::new_long(n),
            Attr::Text(s) => RestrictedExpression::new_string(s),
            Attr::Value(Value::Array(items)) => RestrictedExpression::new_set(
                items.iter().map(text).collect::<Result<Vec<_>, _>>()?,
            ),
            Attr::Value(v) => text(&v)?,
        })
    }
}

/// The context attributes of a call: `business_ref` and the normalised significant
/// arguments (money as minor units plus `<name>_currency`). A value that should be a
/// whole number and is not fails the evaluation (closed), never reads as 0: a policy
/// bounding an amount must not see an amount it cannot read as nothing.
fn context_attrs(
    capability: &Capability,
    business_ref: Option<&str>,
    normalised: &Map<String, Value>,
) -> Result<Vec<(String, Attr)>, String> {
    let mut attrs = Vec::new();
    if let Some(r) = business_ref {
        attrs.push(("business_ref".to_owned(), Attr::Text(r.to_owned())));
    }
    let long = |name: &str, v: &Value| {
        v.as_str()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| format!("context value {name} = {v} is not a whole number"))
    };
    for arg in &capability.key.significant {
        let Some(value) = normalised.get(arg.path.as_str()) else {
            continue;
        };
        let name = context_attr(arg.path.as_str());
        match &arg.normaliser {
            Normaliser::Money { .. } => {
                attrs.push((
                    format!("{name}_currency"),
                    Attr::Value(value["currency"].clone()),
                ));
                let minor = long(&name, &value["minor"])?;
                attrs.push((name, Attr::Long(minor)));
            }
            Normaliser::Integer => {
                let n = long(&name, value)?;
                attrs.push((name, Attr::Long(n)));
            }
            _ => attrs.push((name, Attr::Value(value.clone()))),
        }
    }
    Ok(attrs)
}

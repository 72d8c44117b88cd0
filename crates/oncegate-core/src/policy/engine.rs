//! The compiled policy set a capability holds: the validated Cedar policies, their
//! schema and their hash, read once at load.
//!
//! Kept apart from building and evaluating it (the parent module), which read the
//! capability: a capability holds this set as data, so this file is below the config
//! model and names nothing of it.

use std::collections::HashMap;

use cedar_policy::{Authorizer, EntityTypeName, PolicyId, PolicySet, Schema};

/// A validated policy set for the capabilities that reference one file.
#[derive(Debug)]
pub struct PolicyEngine {
    pub(super) policies: PolicySet,
    pub(super) schema: Schema,
    pub(super) hash: String,
    /// The entity type names, parsed once: Cedar's parser builds its lexer on every
    /// parse, which cost more than the evaluation itself on the hot path.
    pub(super) agent_type: EntityTypeName,
    pub(super) action_type: EntityTypeName,
    pub(super) tenant_type: EntityTypeName,
    pub(super) authorizer: Authorizer,
    /// Each policy's name and `@oncegate` annotation, read once: Cedar parses the
    /// annotation key on every `PolicySet::annotation` call.
    pub(super) notes: HashMap<PolicyId, Notes>,
    /// Per capability (Cedar action), the policies whose action scope can match it:
    /// Cedar checks every policy of the set it is given, and a policy scoped to other
    /// actions can never apply. A capability with none is denied without evaluating.
    pub(super) slices: HashMap<String, PolicySet>,
}

/// What evaluation reads of a policy besides its conditions.
#[derive(Debug)]
pub(super) struct Notes {
    /// The `@id("...")` annotation, or Cedar's positional id.
    pub(super) name: String,
    /// The `@oncegate("...")` annotation.
    pub(super) oncegate: Option<String>,
}

impl PolicyEngine {
    /// A policy's `@id("...")` annotation, or Cedar's positional id.
    pub(super) fn name_of(&self, id: &PolicyId) -> String {
        self.notes
            .get(id)
            .map_or_else(|| id.to_string(), |n| n.name.clone())
    }

    /// How many policies can apply to `capability` (those whose action scope is any
    /// action, or names it): 0 means every call of it is denied, without evaluating.
    pub fn applicable(&self, capability: &str) -> usize {
        self.slices
            .get(capability)
            .map_or(0, |slice| slice.policies().count())
    }

    /// SHA-256 of the policy text: approvals are bound to it.
    pub fn hash(&self) -> &str {
        &self.hash
    }
}

//! Who is asking: a principal's name, and its role when authentication already proved
//! it (a JWT's claims), so the engine needs no registry entry for principals an
//! identity provider vouches for.

use oncegate_core::audit::AuditEvent;
use oncegate_core::config::{Registry, Role};
use serde_json::{Value, json};

/// A principal as the engine sees it. From a `&str` (a registry principal, whose role
/// the registry knows) or [`Who::verified`] (a name and role authentication proved).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Who<'a> {
    name: &'a str,
    role: Option<Role>,
}

impl<'a> Who<'a> {
    /// A principal whose name and role authentication proved (an identity provider's
    /// token): the registry is not asked.
    pub fn verified(name: &'a str, role: Role) -> Self {
        Self {
            name,
            role: Some(role),
        }
    }

    /// Its name (what keys, limits, kill switches and the audit chain name).
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// Its role as proved, if it was (`None`: the registry's).
    pub(crate) fn proved_role(&self) -> Option<Role> {
        self.role
    }

    /// Writes a proved role into an audit event's detail (`"role"`), so the chain says
    /// what an identity provider vouched for; a registry principal's role is the
    /// registry's, and its events stay as they were.
    pub(crate) fn stamp(&self, event: &mut AuditEvent) {
        let Some(role) = self.role else { return };
        let role = json!(role.as_str());
        match &mut event.detail {
            Value::Object(m) => {
                m.insert("role".into(), role);
            }
            Value::Null => event.detail = json!({ "role": role }),
            other => event.detail = json!({ "role": role, "detail": other.take() }),
        }
    }

    /// Its role: as proved, else the registry's (`None`: an unknown principal).
    pub(crate) fn role(&self, registry: &Registry) -> Option<Role> {
        self.role
            .or_else(|| registry.principal(self.name).map(|p| p.role))
    }
}

impl<'a> From<&'a str> for Who<'a> {
    fn from(name: &'a str) -> Self {
        Self { name, role: None }
    }
}

impl<'a> From<&'a String> for Who<'a> {
    fn from(name: &'a String) -> Self {
        Self::from(name.as_str())
    }
}

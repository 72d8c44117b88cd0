//! A principal as authenticated: the name and role a static token or a verified JWT
//! proved. Below [`super::AppState`] and the console's sessions, which both hold one.

use oncegate_core::config::Role;
use oncegate_engine::Who;

/// A principal as authenticated.
#[derive(Clone, Debug)]
pub struct Principal {
    /// The name in the registry, or `principal_prefix` + the token's principal claim.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// The issuer whose JWT proved it (`None`: a static token of the registry).
    pub issuer: Option<String>,
}

impl Principal {
    /// The principal as the engine takes it: a registry name, or a name and role a
    /// token proved.
    pub fn who(&self) -> Who<'_> {
        match self.issuer {
            Some(_) => Who::verified(&self.name, self.role),
            None => Who::from(&self.name),
        }
    }
}

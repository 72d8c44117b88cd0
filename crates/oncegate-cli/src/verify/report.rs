//! What `oncegate verify` reports: one [`Report`] per capability, its recipe findings
//! and the [`Check`]s its simulated scenarios made (`verify --live` reports checks too).

use serde::Serialize;

/// One check's result.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether it held.
    pub ok: bool,
    /// What was seen.
    pub detail: String,
}

/// One capability's report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The capability.
    pub capability: String,
    /// Recipe findings (each one fails the capability).
    pub findings: Vec<String>,
    /// The simulated scenarios.
    pub checks: Vec<Check>,
}

impl Report {
    /// Everything held.
    pub fn ok(&self) -> bool {
        self.findings.is_empty() && self.checks.iter().all(|c| c.ok)
    }
}

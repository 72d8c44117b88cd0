//! The service layer: what the JSON API's routes and the console both do, written once
//! below both (decide an approval, switch a capability or agent off, verify the audit
//! chain), so a click is exactly what an API call is, and neither surface calls the
//! other's handlers.

pub(crate) mod approvals;
pub(crate) mod audit;
pub(crate) mod switches;

//! Upstreams: render a capability's templates, call the provider (HTTP/JSON, or a tool
//! on an MCP server, see [`mcp`]) with the intent key, and classify the answer the way
//! docs/design.md says.
//!
//! Split by concern: [`render`] (templates, the path check), [`executor`] (the engine's
//! `Executor`), [`http`] and [`tool_call`] (the two kinds of upstream), [`answer`]
//! (reading an answer within the limits), [`mcp`] (the MCP client and its sessions).
//!
//! Only proof that no byte left (connection refused, DNS, TLS handshake) makes an
//! attempt `not_applied` without reconciliation; a 429 is a provider's explicit "not
//! done". Anything that may have reached the provider (timeout, reset after send, 5xx)
//! is `unknown`. A 4xx is a definite failure.
//!
//! Two things are refused before anything is claimed ([`Executor::admit`]): a rendered
//! URL whose path has a `.` or `..` segment (an argument such as `customer = ".."` would
//! otherwise move the call to another resource, with the provider's credentials). And an
//! answer over `gateway.max_answer_bytes` / `max_answer_depth` is never stored whole: it
//! is read as a stream, hashed, and stored as its SHA-256, length and a short preview.

mod answer;
pub mod client;
mod executor;
mod http;
pub mod mcp;
pub mod preview;
mod render;
mod tool_call;

pub use executor::UpstreamExecutor;
pub use render::{LOOK_ALIKES, RenderError, server_request};

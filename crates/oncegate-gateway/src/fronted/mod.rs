//! Fronted MCP servers (`[[mcp_servers]]`): their tool lists kept current ([`watch`]:
//! read at start, on the server's change notices and every `refresh`, checked against
//! the pinned definitions) and what each listed tool is to agents ([`classify`]: a
//! declared capability, an undeclared tool passed through or held, or refused).

mod classify;
mod watch;

pub use classify::{Fronted, FrontedTool, Verdict, classify, definition};
pub use watch::{front_servers, read, read_all};

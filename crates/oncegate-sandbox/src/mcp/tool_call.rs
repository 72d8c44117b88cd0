//! The sandbox's MCP tools by name: what each tool does to which resource. Below both
//! the handlers (mcp.rs) and the catalogue that lists the tools.

use crate::resource::Resource;

/// A tool, by what it does to which resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ToolCall {
    Create(Resource),
    Find(Resource),
    GetOrder,
    ListEffects,
}

impl ToolCall {
    pub(super) const GET_ORDER: &str = "get_order";
    pub(super) const LIST_EFFECTS: &str = "list_effects";

    pub(super) fn create_name(resource: Resource) -> &'static str {
        match resource {
            Resource::Charges => "create_charge",
            Resource::Refunds => "create_refund",
            Resource::Emails => "send_email",
            Resource::Ledger => "append_ledger",
        }
    }

    pub(super) fn find_name(resource: Resource) -> &'static str {
        match resource {
            Resource::Charges => "find_charge",
            Resource::Refunds => "find_refund",
            Resource::Emails => "find_email",
            Resource::Ledger => "find_ledger_entry",
        }
    }

    pub(super) fn parse(name: &str) -> Option<ToolCall> {
        match name {
            Self::GET_ORDER => return Some(ToolCall::GetOrder),
            Self::LIST_EFFECTS => return Some(ToolCall::ListEffects),
            _ => {}
        }
        Resource::ALL.into_iter().find_map(|resource| {
            if name == Self::create_name(resource) {
                Some(ToolCall::Create(resource))
            } else if name == Self::find_name(resource) {
                Some(ToolCall::Find(resource))
            } else {
                None
            }
        })
    }
}

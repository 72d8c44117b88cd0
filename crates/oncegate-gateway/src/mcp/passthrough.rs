//! The read-only rest of a fronted MCP server: its resources (list, templates, read), its
//! prompts (list, get) and completions for them, relayed to agents so that a fronted
//! server is not half hidden. None of these has an effect (the MCP specification makes
//! them reads), so nothing is claimed or recorded: each request is asked of the servers
//! on a connection of its own, in config order.
//!
//! Prompts are named as the server's tools are (`<alias>_<prompt>`, or their own names
//! with `prefix = false`); resource URIs are the servers' own (a URI names the resource
//! wherever it is listed), and a read goes to the first server that answers it.

use oncegate_core::config::McpServer;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, ErrorData as McpError, GetPromptRequestParams,
    GetPromptResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, Prompt,
    ReadResourceRequestParams, ReadResourceResult, Reference,
};

use crate::state::AppState;
use crate::upstream::{mcp, server_request};

/// Every fronted server's prompts, under the names agents call them by. A server that
/// cannot be read is left out (and logged); a name two servers offer goes to the first.
pub async fn list_prompts(state: &AppState) -> ListPromptsResult {
    let mut prompts: Vec<Prompt> = Vec::new();
    for server in servers(state) {
        let listed = ask(state, server, async |p| p.list_all_prompts().await).await;
        for mut prompt in listed.unwrap_or_default() {
            let Some(name) = server.offered_name(&prompt.name) else {
                continue;
            };
            if prompts.iter().all(|p| p.name != name) {
                prompt.name = name;
                prompts.push(prompt);
            }
        }
    }
    ListPromptsResult {
        prompts,
        ..Default::default()
    }
}

/// One prompt, by the name agents see, from the first server that offers that name.
pub async fn get_prompt(
    state: &AppState,
    mut params: GetPromptRequestParams,
) -> Result<GetPromptResult, McpError> {
    let asked = params.name.clone();
    let mut last = None;
    for (server, name) in candidates(state, &asked) {
        params.name = name;
        let request = params.clone();
        match ask(state, server, async move |p| p.get_prompt(request).await).await {
            Ok(found) => return Ok(found),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| McpError::invalid_params(format!("no prompt {asked}"), None)))
}

/// Every fronted server's resources, URIs as the servers give them.
pub async fn list_resources(state: &AppState) -> ListResourcesResult {
    let mut resources = Vec::new();
    for server in servers(state) {
        let listed = ask(state, server, async |p| p.list_all_resources().await).await;
        resources.extend(listed.unwrap_or_default());
    }
    ListResourcesResult {
        resources,
        ..Default::default()
    }
}

/// Every fronted server's resource templates.
pub async fn list_resource_templates(state: &AppState) -> ListResourceTemplatesResult {
    let mut resource_templates = Vec::new();
    for server in servers(state) {
        let listed = ask(state, server, async |p| {
            p.list_all_resource_templates().await
        })
        .await;
        resource_templates.extend(listed.unwrap_or_default());
    }
    ListResourceTemplatesResult {
        resource_templates,
        ..Default::default()
    }
}

/// One resource, from the first server that answers for its URI.
pub async fn read_resource(
    state: &AppState,
    params: ReadResourceRequestParams,
) -> Result<ReadResourceResult, McpError> {
    let mut last = None;
    for server in servers(state) {
        let request = params.clone();
        match ask(state, server, async move |p| p.read_resource(request).await).await {
            Ok(found) => return Ok(found),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        McpError::resource_not_found(format!("no resource {}", params.uri), None)
    }))
}

/// Completions for a prompt's or a resource template's argument, from the server that
/// offers it.
pub async fn complete(
    state: &AppState,
    mut params: CompleteRequestParams,
) -> Result<CompleteResult, McpError> {
    let targets: Vec<(&McpServer, Option<String>)> = match &params.r#ref {
        Reference::Prompt(p) => candidates(state, &p.name)
            .into_iter()
            .map(|(s, n)| (s, Some(n)))
            .collect(),
        _ => servers(state).map(|s| (s, None)).collect(),
    };
    let mut last = None;
    for (server, name) in targets {
        if let (Reference::Prompt(p), Some(name)) = (&mut params.r#ref, name) {
            p.name = name;
        }
        let request = params.clone();
        match ask(state, server, async move |p| p.complete(request).await).await {
            Ok(found) => return Ok(found),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| McpError::invalid_params("nothing to complete", None)))
}

/// Whether any server is fronted (the surface then offers resources and prompts).
pub fn any(state: &AppState) -> bool {
    !state.gate().registry().mcp_servers.is_empty()
}

fn servers(state: &AppState) -> impl Iterator<Item = &McpServer> {
    state.gate().registry().mcp_servers.iter()
}

/// The servers that may offer `name`, with the name they know it by.
fn candidates<'a>(state: &'a AppState, name: &str) -> Vec<(&'a McpServer, String)> {
    servers(state)
        .filter_map(|s| {
            let own = if s.prefix {
                name.strip_prefix(&s.alias)?.strip_prefix('_')?.to_owned()
            } else {
                name.to_owned()
            };
            Some((s, own))
        })
        .collect()
}

async fn ask<T>(
    state: &AppState,
    server: &McpServer,
    question: impl AsyncFnOnce(&rmcp::Peer<rmcp::RoleClient>) -> Result<T, rmcp::ServiceError>,
) -> Result<T, McpError> {
    let request = server_request(server).map_err(|e| McpError::internal_error(e, None))?;
    let answer = mcp::with_peer(state.http(), &request, question).await;
    if let Err(e) = &answer {
        tracing::debug!(server = %server.alias, error = %e.message, "a fronted server's read failed");
    }
    answer
}

//! Pinned tool definitions ([`crate::PinsRead`] / [`crate::PinsWrite`]).

use crate::Backend;

// Long on purpose: one story: each step asserts on the state the step before left (pin,
// pending, replaced, back, accepted once, per tool, another handle); cut into functions,
// each would take the store and the same fixtures and read out of order.
/// Pinned tool definitions: the first definition seen is pinned; a different one is
/// pending (first seen kept while it stays), the pin seen again clears it; only the
/// pending digest is accepted, once; another store handle (a replica) sees the same.
pub async fn tool_pins<S: Backend>(store: &S) {
    use crate::OfferedTool;
    let at = |s: i64| jiff::Timestamp::from_second(1_700_000_000 + s).unwrap();
    let offered = |tool: &str, digest: &str, s: i64| OfferedTool {
        server: "pay".into(),
        tool: tool.into(),
        digest: digest.into(),
        definition: format!("{{\"description\":\"{digest}\"}}"),
        at: at(s),
    };
    assert!(store.tool_pins().await.unwrap().is_empty());
    let first = store
        .pin_tool(offered("find", "sha256:a", 1))
        .await
        .unwrap();
    assert_eq!(
        (
            first.digest.as_str(),
            first.pinned_by.as_str(),
            first.pinned_at
        ),
        ("sha256:a", "oncegate", at(1))
    );
    assert_eq!(first.definition, "{\"description\":\"sha256:a\"}");
    assert_eq!(first.pending, None);
    // The same definition again changes nothing.
    assert_eq!(
        store
            .pin_tool(offered("find", "sha256:a", 2))
            .await
            .unwrap(),
        first
    );
    // A changed one is pending, the pin stays; seen again, its first sighting stays.
    let changed = store
        .pin_tool(offered("find", "sha256:b", 3))
        .await
        .unwrap();
    assert_eq!(changed.digest, "sha256:a");
    let pending = changed.pending.clone().expect("pending");
    assert_eq!(
        (pending.digest.as_str(), pending.seen_at),
        ("sha256:b", at(3))
    );
    assert_eq!(pending.definition, "{\"description\":\"sha256:b\"}");
    assert_eq!(
        store
            .pin_tool(offered("find", "sha256:b", 4))
            .await
            .unwrap(),
        changed
    );
    // Another change replaces the pending one.
    let again = store
        .pin_tool(offered("find", "sha256:c", 5))
        .await
        .unwrap();
    assert_eq!(
        again
            .pending
            .as_ref()
            .map(|p| (p.digest.as_str(), p.seen_at)),
        Some(("sha256:c", at(5)))
    );
    // Back to the pin: nothing is pending.
    let back = store
        .pin_tool(offered("find", "sha256:a", 6))
        .await
        .unwrap();
    assert_eq!(
        (back.digest.as_str(), back.pending.clone()),
        ("sha256:a", None)
    );
    // Only the pending digest is accepted: not a stale one, not the pin, not a tool
    // without a pin.
    store
        .pin_tool(offered("find", "sha256:d", 7))
        .await
        .unwrap();
    for stale in ["sha256:b", "sha256:c", "sha256:a"] {
        assert!(
            !store
                .accept_tool("pay", "find", stale, "root", at(8))
                .await
                .unwrap(),
            "{stale} accepted"
        );
    }
    assert!(
        !store
            .accept_tool("pay", "nothing", "sha256:d", "root", at(8))
            .await
            .unwrap()
    );
    assert!(
        store
            .accept_tool("pay", "find", "sha256:d", "root", at(9))
            .await
            .unwrap()
    );
    assert!(
        !store
            .accept_tool("pay", "find", "sha256:d", "root", at(9))
            .await
            .unwrap(),
        "accepted twice"
    );
    // Pins are per (server, tool), listed in that order, shared by every handle.
    store
        .pin_tool(offered("create", "sha256:e", 10))
        .await
        .unwrap();
    let mut other_server = offered("find", "sha256:f", 11);
    other_server.server = "held".into();
    store.pin_tool(other_server).await.unwrap();
    let replica = store.clone();
    let pins = replica.tool_pins().await.unwrap();
    let listed: Vec<_> = pins
        .iter()
        .map(|p| (p.server.as_str(), p.tool.as_str(), p.digest.as_str()))
        .collect();
    assert_eq!(
        listed,
        [
            ("held", "find", "sha256:f"),
            ("pay", "create", "sha256:e"),
            ("pay", "find", "sha256:d"),
        ]
    );
    let accepted = &pins[2];
    assert_eq!(
        (
            accepted.pinned_by.as_str(),
            accepted.pinned_at,
            accepted.pending.clone()
        ),
        ("root", at(9), None)
    );
    assert_eq!(accepted.definition, "{\"description\":\"sha256:d\"}");
}

//! Who holds a claim: the owner a claim asks for, the seal a lease stores of it (never
//! the nonce itself), and the checks a completion's nonce and claimer are held to.

/// The part of a lease's owner that names one claim. A claim's holder is asked for as
/// [`claim_owner`] (`<gate>/<nonce>/<claimer digest>`, a fresh random nonce per claim);
/// the lease stores `<gate>/<seal>` ([`lease_seal`]), never the nonce, so nothing that
/// reads the intent (an approver, the CLI, a log) can rebuild the claim's token. An
/// owner without `/` is its own nonce (tests; leases written before seals store the
/// nonce itself).
pub fn lease_nonce(owner: &str) -> &str {
    owner.rsplit('/').next().unwrap_or(owner)
}

fn digest(text: &str, hex_len: usize) -> String {
    use sha2::{Digest, Sha256};
    let mut h = hex::encode(Sha256::digest(text.as_bytes()));
    h.truncate(hex_len);
    h
}

/// Who claimed, as a lease keeps it: a digest of the principal's name.
fn claimer_digest(principal: &str) -> String {
    digest(principal, 16)
}

/// The holder a claim asks for: this gate, the claim's fresh nonce (which only the
/// claimer learns) and who claims. Never stored as it is ([`lease_seal`]).
pub fn claim_owner(gate: &str, nonce: &str, principal: &str) -> String {
    format!("{gate}/{nonce}/{}", claimer_digest(principal))
}

/// What a lease stores of a claim's nonce and claimer: `s<SHA-256 of the nonce>.<claimer
/// digest>`. A completion proves the claim by the nonce whose digest this is.
pub(super) fn lease_seal(nonce: &str, claimer: &str) -> String {
    format!("s{}.{claimer}", digest(nonce, 32))
}

/// Whether `presented` is the nonce of the claim whose lease stores `stored` (a seal,
/// or a nonce itself in a lease written before seals).
pub(super) fn nonce_holds(stored: &str, presented: &str) -> bool {
    if presented.is_empty() {
        return false;
    }
    match stored.strip_prefix('s').and_then(|s| s.split_once('.')) {
        Some((hash, _)) => digest(presented, 32) == hash,
        None => stored == presented,
    }
}

/// Whether `principal` took the claim whose lease is owned by `owner`; `None` for a
/// lease that does not say (written before seals, or by a test).
pub fn claimed_by(owner: &str, principal: &str) -> Option<bool> {
    lease_nonce(owner)
        .strip_prefix('s')
        .and_then(|s| s.split_once('.'))
        .map(|(_, claimer)| claimer == claimer_digest(principal))
}

//! Harnesses under an access policy, shared by the access tests (`access.rs`,
//! `access_invites.rs`): a policy file and an operator credential, two devices with sessions,
//! and a write that may not create.

use serde_json::{Value, json};

use super::app::{Harness, Store};
use super::device::Device;

/// The operator credential every policy harness is started with.
pub const OPERATOR: &str = "operator-secret-of-at-least-thirty-two-characters";

/// A harness with device identity on and `policy` (TOML) as `--policy`, and an operator
/// credential.
pub async fn with_policy(store: Store, policy: &str) -> Harness {
    let policy = policy.to_owned();
    Harness::auth_on(store, move |c| configure(c, &policy)).await
}

/// Writes `policy` (TOML) and the [`OPERATOR`] credential into `c`'s data directory and points
/// `c` at them (for harnesses built another way, such as over a fake Celeriant node).
pub fn configure(c: &mut celeriant_gateway::config::Config, policy: &str) {
    let file = c.data_dir.join("policy.toml");
    std::fs::write(&file, policy).unwrap();
    c.policy = Some(file);
    let op = c.data_dir.join("operator");
    std::fs::write(&op, OPERATOR).unwrap();
    c.operator_token_file = Some(op);
}

/// `body` (one write) with `allowCreate: false`.
pub fn no_create(mut body: Value) -> Value {
    body["writes"][0]["allowCreate"] = json!(false);
    body
}

/// Two devices with sessions: A (the owner in most tests) and B (the other principal).
pub async fn two(h: &Harness) -> (Device, String, Device, String) {
    let (a, b) = (Device::a(), Device::b());
    let (ta, tb) = (h.open(&a).await, h.open(&b).await);
    (a, ta, b, tb)
}

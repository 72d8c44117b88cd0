//! CPU cost of the pure core on the hot path of every consequential call: deriving the
//! intent key and deciding what to do, for the `charge_card` capability of
//! `examples/payments.toml`. No I/O is measured here (see `oncegate-store`'s `claims`
//! bench for the durable path).
//!
//! Run with `cargo bench -p oncegate-core --bench decide`.

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use oncegate_core::Registry;
use oncegate_core::config::{Capability, ConfigEnv, Role};
use oncegate_core::decide::{self, Action, CallRequest, EffectResult};
use oncegate_core::intent::{IntentRecord, Status};
use oncegate_core::key::{CallScope, DerivedKey, derive};
use oncegate_core::policy::PolicyVerdict;
use serde_json::{Value, json};

/// Reads policy files from disk and resolves time zones from the system database.
struct FsEnv;

impl ConfigEnv for FsEnv {
    fn read_file(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn time_zone(&self, name: &str) -> Option<TimeZone> {
        TimeZone::get(name).ok()
    }
}

fn registry() -> Registry {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "..",
        "examples",
        "payments.toml",
    ]
    .iter()
    .collect();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    Registry::parse(&path, &text, &FsEnv).unwrap_or_else(|e| panic!("invalid example config:\n{e}"))
}

const TENANT: &str = "acme";
const PRINCIPAL: &str = "planner";
const OWNER: &str = "bench-owner";
const APPROVAL_ID: &str = "ap_0123456789abcdef";

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).expect("valid timestamp")
}

fn arguments() -> Value {
    json!({"order_id": "A-1042", "amount": "12.50", "memo": "order A-1042"})
}

fn derive_key(cap: &Capability, args: &Value, tz: &TimeZone) -> DerivedKey {
    derive(
        TENANT,
        PRINCIPAL,
        cap,
        args,
        &CallScope::default(),
        now(),
        tz,
    )
    .expect("the example arguments make a key")
}

fn request<'a>(derived: &'a DerivedKey, args: &'a Value) -> CallRequest<'a> {
    CallRequest {
        principal: PRINCIPAL,
        tenant: TENANT,
        derived,
        arguments: args,
        run_id: None,
        step_id: None,
        owner: OWNER,
        approval: None,
        other_run: None,
        kill_switch: None,
        held: None,
        new_approval_id: APPROVAL_ID,
        rolled_back_at: None,
        caller_sends: false,
    }
}

/// The record a first call claims and whose effect then applied, as the store holds it.
fn applied_record(cap: &Capability, args: &Value, tz: &TimeZone) -> IntentRecord {
    let derived = derive_key(cap, args, tz);
    let first = decide::decide(
        None,
        &request(&derived, args),
        cap,
        &PolicyVerdict::Allow,
        now(),
    );
    assert_eq!(first.action, Action::Execute, "a first call executes");
    let mut claimed = first.record.expect("a first call writes its claim");
    claimed.version += 1;
    let recorded = decide::record_effect(
        &claimed,
        EffectResult::Applied {
            effect_ref: Some("ch_1".into()),
            result: json!({"id": "ch_1"}),
        },
        cap,
        PRINCIPAL,
        now(),
    );
    let mut applied = recorded.record.expect("an applied effect is recorded");
    applied.version += 1;
    applied
}

fn benches(c: &mut Criterion) {
    let registry = registry();
    let cap = registry
        .capability("charge_card")
        .expect("the example declares charge_card")
        .clone();
    let tz = registry.gateway.time_zone.clone();
    let args = arguments();
    let applied = applied_record(&cap, &args, &tz);
    let later = now() + jiff::SignedDuration::from_secs(60);

    // Sanity: the paths measured are the ones named.
    {
        let derived = derive_key(&cap, &args, &tz);
        let replay = decide::decide(
            Some(&applied),
            &request(&derived, &args),
            &cap,
            &PolicyVerdict::Allow,
            later,
        );
        assert_eq!(replay.outcome.status, Status::Replayed);
    }

    let mut group = c.benchmark_group("core");
    group.throughput(Throughput::Elements(1));

    group.bench_function("derive/charge_card", |b| {
        b.iter(|| derive_key(black_box(&cap), black_box(&args), &tz));
    });

    group.bench_function("derive+decide/first_call", |b| {
        b.iter(|| {
            let derived = derive_key(black_box(&cap), black_box(&args), &tz);
            let d = decide::decide(
                None,
                &request(&derived, &args),
                &cap,
                &PolicyVerdict::Allow,
                now(),
            );
            black_box(d)
        });
    });

    group.bench_function("derive+decide/replay", |b| {
        b.iter(|| {
            let derived = derive_key(black_box(&cap), black_box(&args), &tz);
            let d = decide::decide(
                Some(black_box(&applied)),
                &request(&derived, &args),
                &cap,
                &PolicyVerdict::Allow,
                later,
            );
            black_box(d)
        });
    });

    // The Cedar evaluation the Gate runs once per call before deciding (not part of
    // derive + decide above, which take the verdict as an input).
    if let Some(engine) = cap.policy.clone() {
        let derived = derive_key(&cap, &args, &tz);
        group.bench_function("policy/charge_card", |b| {
            b.iter(|| {
                black_box(engine.evaluate(
                    PRINCIPAL,
                    Role::Agent,
                    TENANT,
                    &cap,
                    derived.business_ref.as_deref(),
                    black_box(&derived.normalised),
                ))
            });
        });
    }

    group.finish();
}

criterion_group!(decide_benches, benches);
criterion_main!(decide_benches);

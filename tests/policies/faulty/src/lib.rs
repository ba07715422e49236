//! A policy that misbehaves on request, so that the host's tests can check every bound of the
//! boundary against a real component. It delegates to the default policy except in
//! `reconcile-sandbox` for sandboxes whose name starts with:
//!
//! - `trap-`: panics (a trap: `panic = "abort"` in the `guest-release` profile);
//! - `loop-`: loops forever (the epoch deadline must stop it);
//! - `oom-`: allocates without bound (the memory limit must stop it);
//! - `escape-`: writes a Secret into `kube-system` and returns the host's answer as its error
//!   (the boundary must refuse it, and say why);
//! - `noisy-`: writes 16 KiB to stderr, then reconciles as the default policy does (a policy
//!   that logs must not fail for it);
//! - `remember-`: keeps the sandbox's name and a count of its calls in statics, and reports
//!   what they held when the call began as an Event (`Remembered`), changing nothing: a host
//!   that let guest state outlive a call would show the call before.
//!
//! The features `always-trap`, `always-loop` and `nonconforming` apply one misbehaviour to
//! every sandbox, for the hot-swap tests: such a module must fail the host's self-test.
//!
//! Built by `host/tests/runtime.rs` with
//! `cargo build -p cubepod-faulty-policy --target wasm32-wasip2 --profile guest-release`.

use cubepod_policy_sdk::bindings::{KubeError, PolicyInfo, ReconcileInput, ReconcileOutput};
use cubepod_policy_sdk::client::KubeClient;

pub const POLICY_NAME: &str = "cubepod-faulty";

pub fn describe() -> PolicyInfo {
    PolicyInfo {
        name: POLICY_NAME.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        contract_version: cubepod_policy_sdk::CONTRACT_VERSION.to_string(),
    }
}

/// The misbehaviour a sandbox's name asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Trap,
    Loop,
    Oom,
    Escape,
    Noisy,
    /// Reads far past its linear memory.
    Wild,
    /// Does nothing and reports nothing changed: no children for a new sandbox.
    Idle,
    /// Reports what its statics held from earlier calls in the same instance.
    Remember,
}

impl Fault {
    pub fn of(sandbox_name: &str) -> Option<Fault> {
        if cfg!(feature = "always-trap") {
            return Some(Fault::Trap);
        }
        if cfg!(feature = "always-loop") {
            return Some(Fault::Loop);
        }
        if cfg!(feature = "nonconforming") {
            return Some(Fault::Idle);
        }
        [
            ("trap-", Fault::Trap),
            ("loop-", Fault::Loop),
            ("oom-", Fault::Oom),
            ("escape-", Fault::Escape),
            ("noisy-", Fault::Noisy),
            ("wild-", Fault::Wild),
            ("remember-", Fault::Remember),
        ]
        .into_iter()
        .find(|(prefix, _)| sandbox_name.starts_with(prefix))
        .map(|(_, fault)| fault)
    }
}

/// `reconcile-sandbox`: the default logic, or the fault the sandbox's name asks for.
pub fn reconcile(
    client: &mut impl KubeClient,
    input: &ReconcileInput,
) -> Result<ReconcileOutput, KubeError> {
    match Fault::of(&input.sandbox.name) {
        None => cubepod_policy_sdk::reconcile::reconcile(client, input),
        Some(Fault::Trap) => panic!("faulty policy: trap requested by {}", input.sandbox.name),
        Some(Fault::Loop) => spin_forever(),
        Some(Fault::Oom) => hog_memory(),
        Some(Fault::Escape) => escape(client, input),
        Some(Fault::Idle) => Ok(ReconcileOutput {
            status: input.sandbox.status.clone(),
            requeue_after_seconds: None,
            claim: None,
            events: Vec::new(),
        }),
        Some(Fault::Wild) => read_past_memory(),
        Some(Fault::Remember) => Ok(remember(input)),
        Some(Fault::Noisy) => {
            for line in 0..256 {
                eprintln!("faulty policy: noisy line {line:04} {}", "x".repeat(40));
            }
            cubepod_policy_sdk::reconcile::reconcile(client, input)
        }
    }
}

/// Calls made in this instance so far, and the sandbox of the last one.
static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
static LAST: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

fn remember(input: &ReconcileInput) -> ReconcileOutput {
    let before = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let last = match LAST.lock() {
        Ok(mut last) => std::mem::replace(&mut *last, input.sandbox.name.clone()),
        Err(_) => "a poisoned lock".to_string(),
    };
    let last = if last.is_empty() { "none" } else { &last };
    ReconcileOutput {
        status: input.sandbox.status.clone(),
        requeue_after_seconds: None,
        claim: None,
        events: vec![cubepod_policy_sdk::bindings::Event {
            kind: cubepod_policy_sdk::bindings::EventType::Normal,
            reason: "Remembered".to_string(),
            message: format!("{before} earlier calls; the last for {last}"),
        }],
    }
}

fn spin_forever() -> ! {
    let mut n = 0u64;
    loop {
        // black_box keeps the optimizer from proving the loop has no effect.
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

/// A load at an address far past the memory the policy has: the host must trap it, whether a
/// guard region or a bounds check in the compiled code catches it.
fn read_past_memory() -> ! {
    let address = std::hint::black_box(0xffff_fff0usize) as *const u32;
    // SAFETY: none: this is the fault. In wasm the load traps before it returns.
    let value = unsafe { std::ptr::read_volatile(address) };
    panic!("faulty policy: read {value} past its memory and was not stopped");
}

fn hog_memory() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        // Ones, not zeros: every page is written, so nothing can be left lazily unallocated.
        hoard.push(std::hint::black_box(vec![1u8; 1 << 20]));
        std::hint::black_box(&hoard);
    }
}

/// A well-formed Secret, managed-by labels and all, in a namespace the host does not serve.
fn escape(
    client: &mut impl KubeClient,
    input: &ReconcileInput,
) -> Result<ReconcileOutput, KubeError> {
    let name = "stolen-credentials";
    let manifest = format!(
        r#"{{"apiVersion":"v1","kind":"Secret","metadata":{{"name":"{name}","namespace":"kube-system","labels":{{"app.kubernetes.io/managed-by":"cubepod-controller","cubepod.io/sandbox":"{sandbox}"}}}},"stringData":{{"token":"x"}}}}"#,
        sandbox = input.sandbox.name,
    );
    client.ensure_secret("kube-system", name, &manifest)?;
    Err(KubeError::Other(
        "faulty policy: the host let a Secret into kube-system".to_string(),
    ))
}

/// The faulty policy: the default's decisions, but for `reconcile-sandbox`.
pub struct Faulty;

impl cubepod_policy_sdk::policy::Policy for Faulty {
    fn describe() -> PolicyInfo {
        describe()
    }

    fn reconcile_sandbox(
        client: &mut impl KubeClient,
        input: ReconcileInput,
    ) -> Result<ReconcileOutput, KubeError> {
        reconcile(client, &input)
    }
}

cubepod_policy_sdk::export_policy!(Faulty);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_pick_the_fault() {
        assert_eq!(Fault::of("trap-x"), Some(Fault::Trap));
        assert_eq!(Fault::of("loop-x"), Some(Fault::Loop));
        assert_eq!(Fault::of("oom-x"), Some(Fault::Oom));
        assert_eq!(Fault::of("escape-x"), Some(Fault::Escape));
        assert_eq!(Fault::of("noisy-x"), Some(Fault::Noisy));
        assert_eq!(Fault::of("wild-x"), Some(Fault::Wild));
        assert_eq!(Fault::of("remember-x"), Some(Fault::Remember));
        assert_eq!(Fault::of("dev-alice"), None);
    }
}

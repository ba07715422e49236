//! Which of the policy's exports a call was. The passes name it, a canary counts calls by it
//! (`policy.rs`) and a shadow samples by it (`shadow.rs`); it lives apart from both, since
//! the policy slot holds the shadow, so that neither module reads the other for it.

/// The exports a canary counts the calls of, each by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Export {
    ReconcileSandbox,
    CleanupSandbox,
    ReconcilePool,
    Reap,
}

impl Export {
    pub(crate) const ALL: [Export; 4] = [
        Export::ReconcileSandbox,
        Export::CleanupSandbox,
        Export::ReconcilePool,
        Export::Reap,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Export::ReconcileSandbox => "reconcile-sandbox",
            Export::CleanupSandbox => "cleanup-sandbox",
            Export::ReconcilePool => "reconcile-pool",
            Export::Reap => "reap",
        }
    }
}

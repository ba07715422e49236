//! The active policy module: swapped atomically between reconciles, so that a reconcile in
//! flight finishes on the module it started with.

use std::sync::{Arc, RwLock};

use cubepod_policy_host::runtime::PolicyModule;

/// The running policy module, swapped whole when a new one is admitted.
pub struct PolicySlot {
    current: RwLock<Arc<PolicyModule>>,
}

impl PolicySlot {
    pub(crate) fn new(module: PolicyModule) -> Arc<Self> {
        Arc::new(Self {
            current: RwLock::new(Arc::new(module)),
        })
    }

    /// The module running now.
    pub fn current(&self) -> Arc<PolicyModule> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Makes `module` the active one and returns the one it replaced.
    pub(crate) fn replace(&self, module: PolicyModule) -> Arc<PolicyModule> {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut current, Arc::new(module))
    }
}

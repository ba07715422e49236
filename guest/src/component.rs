//! The default policy's component: every decision as [`Policy`] makes it.

use crate::bindings::PolicyInfo;
use crate::policy::Policy;

pub struct DefaultPolicy;

impl Policy for DefaultPolicy {
    fn describe() -> PolicyInfo {
        crate::describe()
    }
}

crate::export_policy!(DefaultPolicy);

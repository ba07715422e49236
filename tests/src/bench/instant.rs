//! [`INSTANT_CLUSTER`]: a cluster that answers every request at once and keeps nothing, for
//! measuring a policy's decisions without an API behind them.

use cubepod_kube::Discarding;

/// A create returns the object (one sent as text: an empty object, unread, as an API server's
/// answer costs its client the same before and after), a delete succeeds, nothing can be read
/// back, lists are empty and watches end at once.
pub const INSTANT_CLUSTER: Discarding = Discarding::new().with_text_unread();

//! How objects are sent: as Table rows, as their metadata alone, or whole; for a GET, a write's
//! answer and each watch event alike.

use std::borrow::Cow;

use serde_json::Value;

use super::table::{self, IncludeObject};
use super::{events_v1, partial};
use cubepod_kube::Resource;

/// How the objects of a GET, and a write's answer, are sent: as Table rows (with what each row
/// carries), as their metadata alone, or whole.
#[derive(Clone, Copy)]
pub(super) struct Render {
    pub(super) table: Option<IncludeObject>,
    pub(super) metadata: bool,
    /// Events as events.k8s.io/v1 reads them (`events_v1`), not as core/v1 stores them.
    pub(super) events_v1: bool,
}

impl Render {
    /// One object (a GET's, a watch event's) as sent: its one-row Table, its metadata, or it.
    pub(super) fn object<'a>(self, resource: Resource, object: &'a Value) -> Cow<'a, Value> {
        match self.table {
            Some(include) => {
                let version = object["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default();
                Cow::Owned(table::render(resource, &[object], version, include))
            }
            None if self.metadata => Cow::Owned(partial::object(object)),
            None if self.events_v1 => Cow::Owned(events_v1::from_core(object)),
            None => Cow::Borrowed(object),
        }
    }
}

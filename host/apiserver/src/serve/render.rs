//! How objects are sent: as Table rows, as their metadata alone, or whole; for a GET, a write's
//! answer and each watch event alike.

use std::borrow::Cow;

use serde_json::Value;

use super::partial;
use super::table::{self, IncludeObject};
use cubepod_kube::Resource;

/// How the objects of a GET, and a write's answer, are sent: as Table rows (with what each row
/// carries), as their metadata alone, or whole.
#[derive(Clone, Copy)]
pub(super) struct Render {
    pub(super) table: Option<IncludeObject>,
    pub(super) metadata: bool,
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
            None => Cow::Borrowed(object),
        }
    }
}

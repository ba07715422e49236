//! The cluster's namespaces. A cluster made with a set of them (the embedded cluster, the
//! tests' fake API server) has those and no other: a create anywhere else is answered as the
//! API server's namespace lifecycle answers it, `namespaces "x" not found`. A cluster made
//! without one (the default, for the tests that put objects in any namespace they like) has
//! every namespace.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::meta;
use super::store::Store;
use cubepod_kube::{ApiError, ApiErrorKind};

/// The namespaces every Kubernetes cluster starts with.
pub(crate) const BUILT_IN: [&str; 4] = ["default", "kube-node-lease", "kube-public", "kube-system"];

pub(crate) struct Namespaces {
    /// `None`: every namespace exists.
    only: Option<BTreeSet<String>>,
    /// When the cluster started: every namespace's creation.
    created: String,
    /// Each namespace's uid, made when it is first shown.
    uids: BTreeMap<String, String>,
}

impl Namespaces {
    pub(crate) fn new(only: Option<BTreeSet<String>>) -> Self {
        Self {
            only,
            created: meta::now(),
            uids: BTreeMap::new(),
        }
    }

    pub(crate) fn exists(&self, name: &str) -> bool {
        self.only.as_ref().is_none_or(|only| only.contains(name))
    }

    /// The namespaces to list: the set, or (every namespace existing) `default` and those that
    /// hold an object.
    pub(crate) fn names(&self, store: &Store) -> BTreeSet<String> {
        match &self.only {
            Some(only) => only.clone(),
            None => {
                let mut names: BTreeSet<String> = store.namespaces();
                names.insert("default".into());
                names
            }
        }
    }

    /// The Namespace object of `name`, or NotFound.
    pub(crate) fn get(&mut self, name: &str) -> Result<Value, ApiError> {
        if !self.exists(name) {
            return Err(not_found(name));
        }
        let uid = self
            .uids
            .entry(name.to_owned())
            .or_insert_with(meta::new_uid)
            .clone();
        Ok(json!({
            "kind": "Namespace",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "uid": uid,
                "resourceVersion": "1",
                "creationTimestamp": self.created,
                "labels": {"kubernetes.io/metadata.name": name},
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }))
    }
}

/// `namespaces "x" not found`, as the API server words a missing namespace.
pub(crate) fn not_found(name: &str) -> ApiError {
    ApiError::new(
        ApiErrorKind::NotFound,
        format!("namespaces \"{name}\" not found"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_is_all_there_is_and_without_one_every_namespace_exists() {
        let mut only = Namespaces::new(Some(BTreeSet::from(["a".to_owned()])));
        assert!(only.exists("a") && !only.exists("b"));
        assert_eq!(only.get("a").unwrap()["status"]["phase"], "Active");
        let uid = only.get("a").unwrap()["metadata"]["uid"].clone();
        assert_eq!(
            only.get("a").unwrap()["metadata"]["uid"],
            uid,
            "a namespace keeps its uid"
        );
        assert_eq!(
            only.get("b").unwrap_err().message,
            "namespaces \"b\" not found"
        );
        let store = Store::default();
        assert_eq!(only.names(&store), BTreeSet::from(["a".to_owned()]));

        let mut any = Namespaces::new(None);
        assert!(any.exists("anything"));
        assert!(any.get("anything").is_ok());
        assert_eq!(any.names(&store), BTreeSet::from(["default".to_owned()]));
    }
}

//! How a kind's fields merge, for server-side apply and strategic merge patches: which lists
//! are keyed by which fields, which are sets, which are atomic, and which objects are maps
//! whose keys are data rather than a struct's fields. A custom resource's schema says so
//! (`x-kubernetes-list-type`, `additionalProperties`); the built-in kinds' Go types say so,
//! and this module holds what they say for the fields these kinds have.

use cubepod_kube::Resource;

use super::schema::{self, ListType};

/// How a list merges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ListKind {
    /// Replaced whole.
    Atomic,
    /// Scalars, each owned and merged on its own.
    Set,
    /// Objects identified by these fields (the first is the strategic merge patch's key).
    Map(Vec<String>),
}

/// The merge rules of one kind.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    resource: Resource,
}

/// Lists of the built-in kinds that are not atomic, by their path (a list's items stepped
/// into), with their keys; a one-key entry whose key is empty is a set.
const BUILT_IN_LISTS: &[(&[&str], &[&str])] = &[
    (&["metadata", "ownerReferences"], &["uid"]),
    (&["metadata", "finalizers"], &[]),
    (&["spec", "containers"], &["name"]),
    (&["spec", "initContainers"], &["name"]),
    (&["spec", "ephemeralContainers"], &["name"]),
    (&["spec", "volumes"], &["name"]),
    (&["spec", "imagePullSecrets"], &["name"]),
    (&["status", "conditions"], &["type"]),
];

/// Lists of a Pod's containers, by their path below the container.
const CONTAINER_LISTS: &[(&str, &[&str])] = &[
    ("env", &["name"]),
    ("ports", &["containerPort", "protocol"]),
    ("volumeMounts", &["mountPath"]),
    ("volumeDevices", &["devicePath"]),
];

/// Objects of the built-in kinds whose keys are data (`map[string]string` and the like).
const BUILT_IN_MAPS: &[&str] = &[
    "labels",
    "annotations",
    "data",
    "binaryData",
    "stringData",
    "matchLabels",
    "nodeSelector",
    "limits",
    "requests",
    "capacity",
    "allocatable",
];

impl Shape {
    pub(crate) fn of(resource: Resource) -> Shape {
        Shape { resource }
    }

    /// How the list at `path` merges.
    pub(crate) fn list(self, path: &[String]) -> ListKind {
        if let Some(crd) = schema::of(self.resource)
            && path.first().is_some_and(|f| f != "metadata")
        {
            return match crd.at(path).and_then(|node| node.list_type.clone()) {
                Some(ListType::Set) => ListKind::Set,
                Some(ListType::Map(keys)) => ListKind::Map(keys),
                Some(ListType::Atomic) | None => ListKind::Atomic,
            };
        }
        let names: Vec<&str> = path.iter().map(String::as_str).collect();
        let service_ports = self.resource == Resource::Service && names == ["spec", "ports"];
        if service_ports {
            return keyed(&["port", "protocol"]);
        }
        if let Some((_, keys)) = BUILT_IN_LISTS.iter().find(|(p, _)| *p == names.as_slice()) {
            return if keys.is_empty() {
                ListKind::Set
            } else {
                keyed(keys)
            };
        }
        if self.resource == Resource::Pod
            && let [
                "spec",
                "containers" | "initContainers" | "ephemeralContainers",
                field,
            ] = names.as_slice()
            && let Some((_, keys)) = CONTAINER_LISTS.iter().find(|(f, _)| f == field)
        {
            return keyed(keys);
        }
        ListKind::Atomic
    }

    /// Whether the object at `path` is a map whose keys are data: its own presence is owned
    /// (FieldsV1's `.`) beside its keys'.
    pub(crate) fn is_map(self, path: &[String]) -> bool {
        if let Some(crd) = schema::of(self.resource)
            && path.first().is_some_and(|f| f != "metadata")
        {
            return crd.at(path).is_some_and(|node| {
                node.additional_properties.is_some() && node.properties.is_empty()
            });
        }
        let service_selector =
            self.resource == Resource::Service && path.len() == 2 && path[1] == "selector";
        service_selector
            || path
                .last()
                .is_some_and(|last| BUILT_IN_MAPS.contains(&last.as_str()))
    }
}

fn keyed(keys: &[&str]) -> ListKind {
    ListKind::Map(keys.iter().map(|k| (*k).to_owned()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn built_in_lists_are_keyed_as_their_go_types_say() {
        let pod = Shape::of(Resource::Pod);
        assert_eq!(pod.list(&path(&["spec", "containers"])), keyed(&["name"]));
        assert_eq!(
            pod.list(&path(&["spec", "containers", "ports"])),
            keyed(&["containerPort", "protocol"])
        );
        assert_eq!(pod.list(&path(&["metadata", "finalizers"])), ListKind::Set);
        assert_eq!(pod.list(&path(&["spec", "tolerations"])), ListKind::Atomic);
        let service = Shape::of(Resource::Service);
        assert_eq!(
            service.list(&path(&["spec", "ports"])),
            keyed(&["port", "protocol"])
        );
        assert!(Shape::of(Resource::ConfigMap).is_map(&path(&["data"])));
        assert!(!Shape::of(Resource::ConfigMap).is_map(&path(&["metadata"])));
        assert!(service.is_map(&path(&["spec", "selector"])));
    }

    #[test]
    fn a_custom_resource_follows_its_schema() {
        let sandbox = Shape::of(Resource::Sandbox);
        assert_eq!(
            sandbox.list(&path(&["metadata", "ownerReferences"])),
            keyed(&["uid"])
        );
        assert!(sandbox.is_map(&path(&["metadata", "labels"])));
        assert!(!sandbox.is_map(&path(&["spec"])));
    }
}

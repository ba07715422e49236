//! `meta.k8s.io/v1` `PartialObjectMetadata`: objects as their metadata alone, what client-go's
//! metadata client asks for (`Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`
//! for one object and a watch's events, `as=PartialObjectMetadataList` for a list), and what
//! the controller asks for of the children it reads only the metadata of.

use serde_json::{Value, json};

/// Whether an `Accept` header asks (in any of its media ranges) for `as=<kind>` of
/// `meta.k8s.io` in one of `versions`.
pub(crate) fn meta_media(accept: &str, kind: &str, versions: &[&str]) -> bool {
    let wanted = format!("as={kind}");
    accept.split(',').any(|range| {
        let params: Vec<&str> = range.split(';').skip(1).map(str::trim).collect();
        params.contains(&wanted.as_str())
            && params.contains(&"g=meta.k8s.io")
            && versions
                .iter()
                .any(|v| params.contains(&format!("v={v}").as_str()))
    })
}

/// Whether `accept` asks for metadata: `PartialObjectMetadataList` for a `list`, otherwise
/// `PartialObjectMetadata` (one object, or each object of a watch). The other one is not
/// served, as by the API server: the request falls back to the header's next media range.
pub(crate) fn wanted(accept: &str, list: bool) -> bool {
    let kind = if list {
        "PartialObjectMetadataList"
    } else {
        "PartialObjectMetadata"
    };
    meta_media(accept, kind, &["v1"])
}

/// `object`'s metadata as a `PartialObjectMetadata`.
pub(crate) fn object(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object["metadata"],
    })
}

/// A list's items as a `PartialObjectMetadataList` with the list's `metadata`.
pub(crate) fn list(items: &[Value], metadata: Value) -> Value {
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "items": items.iter().map(object).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_is_asked_for_as_client_gos_metadata_client_asks() {
        let watch = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
        assert!(wanted(watch, false));
        assert!(!wanted(watch, true));
        let list =
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert!(wanted(list, true));
        assert!(!wanted(list, false));
        assert!(!wanted("application/json", false));
        assert!(!wanted(
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1",
            false
        ));
        assert!(!wanted(
            "application/json;as=Table;g=meta.k8s.io;v=v1",
            false
        ));
    }

    #[test]
    fn only_the_metadata_is_sent() {
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "ns", "resourceVersion": "7"},
            "data": {"token": "c2VjcmV0"},
        });
        assert_eq!(
            list(&[secret], json!({"resourceVersion": "9"})),
            json!({
                "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": "9"},
                "items": [{
                    "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                    "metadata": {"name": "s", "namespace": "ns", "resourceVersion": "7"},
                }],
            })
        );
    }
}

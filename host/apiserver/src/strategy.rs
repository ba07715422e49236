//! Per-kind rules of the API server ("strategies"): what a create must carry, what it defaults,
//! and which kinds have a `status` subresource.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::errors;
use super::field::{BadValue, FieldError, Kind};
use super::meta;
use cubepod_kube::resource::StatusWrites;
use cubepod_kube::{ApiResult, Resource};

/// Kinds whose main resource ignores `status`: only `patch_status` changes it.
pub(crate) fn has_status_subresource(resource: Resource) -> bool {
    resource.descriptor().status == StatusWrites::Subresource
}

/// Kinds with a `/status` endpoint at all.
pub(crate) fn accepts_status_patch(resource: Resource) -> bool {
    match resource.descriptor().status {
        StatusWrites::Subresource | StatusWrites::ObjectAndSubresource => true,
        StatusWrites::Object => false,
    }
}

/// Checks the shape of a new object and fills `kind`, `apiVersion` and the namespace.
pub(crate) fn validate_create(
    resource: Resource,
    namespace: &str,
    mut object: Value,
) -> ApiResult<Value> {
    if !object.is_object() {
        return Err(errors::bad_request(
            "the body of a create must be a JSON object",
        ));
    }
    if namespace.is_empty() {
        return Err(errors::bad_request(format!(
            "{} is namespaced: a namespace is required",
            resource.plural()
        )));
    }
    let name = meta::name(&object).unwrap_or_default().to_owned();
    if name.is_empty() {
        return Err(errors::invalid(
            resource,
            "",
            &[FieldError::required(
                "metadata.name",
                "name or generateName is required",
            )],
        ));
    }
    if meta::namespace(&object).is_some_and(|ns| ns != namespace) {
        return Err(errors::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    for (field, expected) in [
        ("kind", resource.kind()),
        ("apiVersion", resource.api_version()),
    ] {
        match object.get(field) {
            None | Some(Value::Null) => {
                meta::object_mut(&mut object).insert(field.into(), expected.into());
            }
            Some(value) if value.as_str() == Some(expected) => {}
            Some(value) => {
                return Err(errors::invalid(
                    resource,
                    &name,
                    &[FieldError::invalid(
                        field,
                        BadValue::Raw(value.to_string()),
                        format!("must be {expected}"),
                    )],
                ));
            }
        }
    }
    meta::set(&mut object, "namespace", namespace);
    Ok(object)
}

/// What the API server (and, for PVCs, the volume binder) makes of a new object's status.
pub(crate) fn prepare_for_create(resource: Resource, object: &mut Value) -> ApiResult<()> {
    let fields = meta::object_mut(object);
    match resource {
        Resource::Sandbox | Resource::PodWarmPool | Resource::PolicyRollout => {
            fields.remove("status");
        }
        Resource::Pod => {
            fields.insert("status".into(), json!({"phase": "Pending"}));
        }
        Resource::PersistentVolumeClaim => {
            let status = bound_claim_status(fields.get("spec"));
            fields.insert("status".into(), status);
        }
        Resource::Service => default_service(fields),
        Resource::Secret
        | Resource::Event
        | Resource::Lease
        | Resource::NetworkPolicy
        | Resource::ConfigMap => {}
    }
    prepare_for_update(resource, object)
}

/// Normalizations applied on every write.
pub(crate) fn prepare_for_update(resource: Resource, object: &mut Value) -> ApiResult<()> {
    if resource == Resource::Secret {
        fold_string_data(object)?;
    }
    Ok(())
}

/// The API server's limit on a ConfigMap's or a Secret's data (`MaxSecretSize`).
const MAX_DATA_BYTES: usize = 1024 * 1024;

/// The API server's limit on an object's annotations, keys and values together
/// (`TotalAnnotationSizeLimitB`).
const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

/// The size limits every create and update is held to: the annotations of any object, the data
/// of a ConfigMap or a Secret, worded as the API server's `field.TooLong`.
pub(crate) fn validate_sizes(resource: Resource, object: &Value) -> Vec<FieldError> {
    let too_long = |field: &str, limit: usize| {
        FieldError::new(
            Kind::TooLong,
            field,
            BadValue::Omit,
            format!("may not be more than {limit} bytes"),
        )
    };
    let mut errors = Vec::new();
    let annotations: usize = object
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|annotations| {
            annotations
                .iter()
                .map(|(key, value)| key.len() + value.as_str().map_or(0, str::len))
                .sum()
        })
        .unwrap_or(0);
    if annotations > MAX_ANNOTATION_BYTES {
        errors.push(too_long("metadata.annotations", MAX_ANNOTATION_BYTES));
    }
    let text = |field: &str| -> usize {
        object
            .get(field)
            .and_then(Value::as_object)
            .map(|data| data.values().map(|v| v.as_str().map_or(0, str::len)).sum())
            .unwrap_or(0)
    };
    // base64 in JSON; the limit is on the bytes it decodes to.
    let decoded = |field: &str| -> usize {
        object
            .get(field)
            .and_then(Value::as_object)
            .map(|data| {
                data.values()
                    .filter_map(Value::as_str)
                    .map(decoded_len)
                    .sum()
            })
            .unwrap_or(0)
    };
    let data = match resource {
        // The whole object is at fault: the API server's path for it prints as `[]`.
        Resource::ConfigMap => Some(("[]", text("data") + decoded("binaryData"))),
        Resource::Secret => Some(("data", decoded("data"))),
        Resource::Sandbox
        | Resource::PodWarmPool
        | Resource::Pod
        | Resource::PersistentVolumeClaim
        | Resource::Event
        | Resource::Lease
        | Resource::NetworkPolicy
        | Resource::Service
        | Resource::PolicyRollout => None,
    };
    if let Some((field, bytes)) = data
        && bytes > MAX_DATA_BYTES
    {
        errors.push(too_long(field, MAX_DATA_BYTES));
    }
    errors
}

/// How many bytes base64 `encoded` stands for, without decoding it (every write of a ConfigMap
/// is measured).
fn decoded_len(encoded: &str) -> usize {
    let padding = encoded.bytes().rev().take_while(|b| *b == b'=').count();
    (encoded.len() / 4 * 3).saturating_sub(padding)
}

/// What the API server fills in a Service: `type: ClusterIP`, each port's protocol and
/// targetPort, and an empty load balancer status.
fn default_service(fields: &mut Map<String, Value>) {
    if let Some(Value::Object(spec)) = fields.get_mut("spec") {
        spec.entry("type").or_insert_with(|| "ClusterIP".into());
        if let Some(Value::Array(ports)) = spec.get_mut("ports") {
            for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                port.entry("protocol").or_insert_with(|| "TCP".into());
                if let Some(number) = port.get("port").cloned() {
                    port.entry("targetPort").or_insert(number);
                }
            }
        }
    }
    fields.insert("status".into(), json!({"loadBalancer": {}}));
}

/// A claim bound at once: its capacity is what it asked for.
fn bound_claim_status(spec: Option<&Value>) -> Value {
    let mut status = Map::new();
    status.insert("phase".into(), "Bound".into());
    if let Some(modes) = spec.and_then(|s| s.get("accessModes")) {
        status.insert("accessModes".into(), modes.clone());
    }
    if let Some(storage) = spec.and_then(|s| s.pointer("/resources/requests/storage")) {
        status.insert("capacity".into(), json!({ "storage": storage }));
    }
    Value::Object(status)
}

/// Moves a Secret's `stringData` into `data`, base64-encoded; `stringData` wins on a clash.
fn fold_string_data(secret: &mut Value) -> ApiResult<()> {
    let name = meta::name(secret).unwrap_or_default().to_owned();
    let fields = meta::object_mut(secret);
    let Some(string_data) = fields.remove("stringData") else {
        return Ok(());
    };
    let Value::Object(string_data) = string_data else {
        if string_data.is_null() {
            return Ok(());
        }
        return Err(errors::invalid(
            Resource::Secret,
            &name,
            &[FieldError::invalid(
                "stringData",
                BadValue::Omit,
                "must be an object of strings",
            )],
        ));
    };
    let data = meta::object_mut(fields.entry("data").or_insert_with(|| json!({})));
    for (key, value) in string_data {
        let Some(text) = value.as_str() else {
            return Err(errors::invalid(
                Resource::Secret,
                &name,
                &[FieldError::invalid(
                    format!("stringData[{key}]"),
                    BadValue::Omit,
                    "must be a string",
                )],
            ));
        };
        let encoded = base64::engine::general_purpose::STANDARD.encode(text);
        data.insert(key, encoded.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cubepod_kube::ApiErrorKind;

    #[test]
    fn create_fills_kind_and_namespace() {
        let pod = validate_create(Resource::Pod, "ns", json!({"metadata": {"name": "a"}})).unwrap();
        assert_eq!(pod["kind"], "Pod");
        assert_eq!(pod["apiVersion"], "v1");
        assert_eq!(pod["metadata"]["namespace"], "ns");
    }

    #[test]
    fn create_refuses_bad_shapes() {
        let refused = |resource, ns: &str, object: Value| {
            validate_create(resource, ns, object).unwrap_err().kind
        };
        assert_eq!(
            refused(Resource::Pod, "ns", json!({})),
            ApiErrorKind::Invalid
        );
        assert_eq!(
            refused(Resource::Pod, "ns", json!([1])),
            ApiErrorKind::Invalid
        );
        assert_eq!(
            refused(Resource::Pod, "", json!({"metadata": {"name": "a"}})),
            ApiErrorKind::Invalid
        );
        assert_eq!(
            refused(
                Resource::Pod,
                "ns",
                json!({"metadata": {"name": "a", "namespace": "x"}})
            ),
            ApiErrorKind::Invalid
        );
        assert_eq!(
            refused(
                Resource::Pod,
                "ns",
                json!({"kind": "Secret", "metadata": {"name": "a"}})
            ),
            ApiErrorKind::Invalid
        );
    }

    #[test]
    fn secret_string_data_is_encoded_into_data() {
        let mut secret = json!({"metadata": {"name": "s"}, "data": {"old": "eA==", "k": "eA=="},
            "stringData": {"k": "hello", "token": "t0k"}});
        prepare_for_create(Resource::Secret, &mut secret).unwrap();
        assert_eq!(
            secret,
            json!({"metadata": {"name": "s"},
                "data": {"old": "eA==", "k": "aGVsbG8=", "token": "dDBr"}})
        );
        let mut bad = json!({"metadata": {"name": "s"}, "stringData": {"k": 1}});
        assert!(prepare_for_update(Resource::Secret, &mut bad).is_err());
    }

    #[test]
    fn data_and_annotations_are_held_to_the_api_servers_limits() {
        let messages = |resource, object: Value| -> Vec<String> {
            validate_sizes(resource, &object)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        let mib = "x".repeat(MAX_DATA_BYTES);
        let at_limit = json!({"data": {"a": mib}});
        assert!(messages(Resource::ConfigMap, at_limit).is_empty());
        let over = json!({"data": {"a": mib}, "binaryData": {"b": "eA=="}});
        assert_eq!(
            messages(Resource::ConfigMap, over),
            ["[]: Too long: may not be more than 1048576 bytes"]
        );
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(vec![0u8; MAX_DATA_BYTES + 1]);
        assert_eq!(
            messages(Resource::Secret, json!({"data": {"k": encoded}})),
            ["data: Too long: may not be more than 1048576 bytes"]
        );
        assert_eq!(decoded_len("eA=="), 1);
        assert_eq!(decoded_len("eHk="), 2);
        assert_eq!(decoded_len("eHl6"), 3);
        let annotation = "y".repeat(MAX_ANNOTATION_BYTES);
        let annotated = json!({"metadata": {"annotations": {"k": annotation}}});
        assert_eq!(
            messages(Resource::Sandbox, annotated),
            ["metadata.annotations: Too long: may not be more than 262144 bytes"]
        );
    }

    #[test]
    fn claims_are_bound_and_custom_status_dropped() {
        let mut claim = json!({"spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}}});
        prepare_for_create(Resource::PersistentVolumeClaim, &mut claim).unwrap();
        assert_eq!(claim["status"]["phase"], "Bound");
        assert_eq!(claim["status"]["capacity"]["storage"], "1Gi");

        let mut sandbox = json!({"spec": {}, "status": {"phase": "Running"}});
        prepare_for_create(Resource::Sandbox, &mut sandbox).unwrap();
        assert!(sandbox.get("status").is_none());
    }
}

//! `meta.k8s.io/v1` Table responses, what `kubectl get` asks for (`Accept:
//! application/json;as=Table;v=v1;g=meta.k8s.io`): a CRD's `additionalPrinterColumns` with their
//! JSONPaths evaluated, and for Pods and PVCs the columns the API server prints for them.

use serde_json::{Value, json};

use super::partial;
use crate::crds::{self, PrinterColumn};
use cubepod_kube::Resource;

/// What each row carries besides its cells (`includeObject`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    None,
    /// `PartialObjectMetadata`: the default, what kubectl needs for labels and namespaces.
    #[default]
    Metadata,
    Object,
}

impl IncludeObject {
    pub(crate) fn parse(value: &str) -> Option<Self> {
        match value {
            "None" => Some(Self::None),
            "Metadata" => Some(Self::Metadata),
            "Object" => Some(Self::Object),
            _ => None,
        }
    }
}

/// Whether an `Accept` header asks for a Table (any of its media ranges).
pub(crate) fn wanted(accept: &str) -> bool {
    partial::meta_media(accept, "Table", &["v1", "v1beta1"])
}

/// How a cell's value is found.
enum Source {
    /// A CRD column's JSONPath (`.spec.replicas`).
    Path(Vec<Segment>),
    Name,
    Age,
    Computed(fn(&Value) -> Value),
}

struct Column {
    name: String,
    kind: &'static str,
    format: &'static str,
    description: String,
    priority: i64,
    source: Source,
    /// `date` columns of a CRD: the timestamp shown as an age.
    date: bool,
}

fn column(name: &str, kind: &'static str, priority: i64, source: Source) -> Column {
    Column {
        name: name.to_owned(),
        kind,
        format: if matches!(source, Source::Name) {
            "name"
        } else {
            ""
        },
        description: String::new(),
        priority,
        source,
        date: false,
    }
}

fn columns(resource: Resource) -> Vec<Column> {
    let name = || column("Name", "string", 0, Source::Name);
    let age = || column("Age", "string", 0, Source::Age);
    if let Some(crd) = crds::of(resource) {
        let mut columns = vec![name()];
        columns.extend(crd.columns.iter().map(crd_column));
        return columns;
    }
    match resource {
        Resource::Pod => vec![
            name(),
            column("Ready", "string", 0, Source::Computed(pod_ready)),
            column("Status", "string", 0, Source::Computed(pod_status)),
            column("Restarts", "string", 0, Source::Computed(pod_restarts)),
            age(),
            column("IP", "string", 1, path_source(".status.podIP")),
            column("Node", "string", 1, path_source(".spec.nodeName")),
        ],
        Resource::PersistentVolumeClaim => vec![
            name(),
            column("Status", "string", 0, path_source(".status.phase")),
            column("Volume", "string", 0, path_source(".spec.volumeName")),
            column(
                "Capacity",
                "string",
                0,
                path_source(".status.capacity.storage"),
            ),
            column("Access Modes", "string", 0, Source::Computed(access_modes)),
            column(
                "StorageClass",
                "string",
                0,
                path_source(".spec.storageClassName"),
            ),
            age(),
            column("VolumeMode", "string", 1, path_source(".spec.volumeMode")),
        ],
        Resource::Secret => vec![
            name(),
            column("Type", "string", 0, path_source(".type")),
            column("Data", "string", 0, Source::Computed(secret_data)),
            age(),
        ],
        // `kubectl get events`: what happened to which object, newest time first.
        Resource::Event => vec![
            column("Last Seen", "string", 0, Source::Computed(event_last_seen)),
            column("Type", "string", 0, path_source(".type")),
            column("Reason", "string", 0, path_source(".reason")),
            column("Object", "string", 0, Source::Computed(event_object)),
            column("Message", "string", 0, path_source(".message")),
            column("Count", "string", 1, path_source(".count")),
            column("Name", "string", 1, Source::Name),
        ],
        Resource::Lease => vec![
            name(),
            column("Holder", "string", 0, path_source(".spec.holderIdentity")),
            age(),
        ],
        Resource::NetworkPolicy => vec![
            name(),
            column("Pod-Selector", "string", 0, Source::Computed(pod_selector)),
            age(),
        ],
        Resource::Service => vec![
            name(),
            column("Type", "string", 0, path_source(".spec.type")),
            column("Cluster-IP", "string", 0, path_source(".spec.clusterIP")),
            column("Port(s)", "string", 0, Source::Computed(service_ports)),
            age(),
            column("Selector", "string", 1, Source::Computed(service_selector)),
        ],
        // Our own kinds' columns are their CRDs' (above).
        Resource::ConfigMap
        | Resource::Sandbox
        | Resource::PodWarmPool
        | Resource::PolicyRollout => vec![name(), age()],
    }
}

fn path_source(path: &str) -> Source {
    Source::Path(parse_path(path).unwrap_or_default())
}

fn crd_column(printer: &PrinterColumn) -> Column {
    let kind = match printer.kind.as_str() {
        "integer" => "integer",
        "number" => "number",
        "boolean" => "boolean",
        "date" => "date",
        _ => "string",
    };
    Column {
        name: printer.name.clone(),
        kind,
        format: "",
        description: printer.description.clone(),
        priority: printer.priority,
        source: path_source(&printer.json_path),
        date: kind == "date",
    }
}

/// The Table of `objects` (one row each), at the list's `resource_version`.
pub(crate) fn render(
    resource: Resource,
    objects: &[&Value],
    resource_version: &str,
    include: IncludeObject,
) -> Value {
    render_columns(&columns(resource), objects, resource_version, include)
}

/// The Table of Namespaces, with the columns the API server prints for them.
pub(crate) fn namespaces(
    objects: &[&Value],
    resource_version: &str,
    include: IncludeObject,
) -> Value {
    let columns = [
        column("Name", "string", 0, Source::Name),
        column("Status", "string", 0, path_source(".status.phase")),
        column("Age", "string", 0, Source::Age),
    ];
    render_columns(&columns, objects, resource_version, include)
}

fn render_columns(
    columns: &[Column],
    objects: &[&Value],
    resource_version: &str,
    include: IncludeObject,
) -> Value {
    let definitions: Vec<Value> = columns
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "type": c.kind,
                "format": c.format,
                "description": c.description,
                "priority": c.priority,
            })
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let cells: Vec<Value> = columns.iter().map(|c| cell(c, object)).collect();
            let mut row = json!({ "cells": cells });
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => row["object"] = partial::object(object),
                IncludeObject::Object => row["object"] = (*object).clone(),
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": { "resourceVersion": resource_version },
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

fn cell(column: &Column, object: &Value) -> Value {
    let value = match &column.source {
        Source::Name => object["metadata"]["name"].clone(),
        Source::Age => age(&object["metadata"]["creationTimestamp"]),
        Source::Computed(compute) => compute(object),
        Source::Path(path) => match lookup(object, path) {
            Some(value) if column.date => age(value),
            Some(value) => value.clone(),
            None => Value::Null,
        },
    };
    match (column.kind, value) {
        // As the API server prints a string column: the value's text.
        ("string", Value::Number(n)) => Value::String(n.to_string()),
        ("string", Value::Bool(b)) => Value::String(b.to_string()),
        (_, value) => value,
    }
}

/// A timestamp as the API server shows an age (`5m`, `3h12m`, `2d`).
fn age(timestamp: &Value) -> Value {
    let Some(text) = timestamp.as_str() else {
        return Value::String("<unknown>".into());
    };
    match text.parse::<jiff::Timestamp>() {
        Ok(then) => {
            let seconds = jiff::Timestamp::now().as_second() - then.as_second();
            Value::String(human_duration(seconds))
        }
        Err(_) => Value::String("<invalid>".into()),
    }
}

/// apimachinery's `duration.HumanDuration`, on whole seconds.
pub(crate) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn pod_ready(pod: &Value) -> Value {
    let statuses = pod["status"]["containerStatuses"].as_array();
    let total = pod["spec"]["containers"].as_array().map_or(0, Vec::len);
    let ready = statuses.map_or(0, |s| s.iter().filter(|c| c["ready"] == true).count());
    Value::String(format!("{ready}/{total}"))
}

fn pod_status(pod: &Value) -> Value {
    if pod["metadata"]["deletionTimestamp"].is_string() {
        return Value::String("Terminating".into());
    }
    let reason = pod["status"]["reason"]
        .as_str()
        .or_else(|| pod["status"]["phase"].as_str())
        .unwrap_or("Pending");
    Value::String(reason.to_owned())
}

fn pod_restarts(pod: &Value) -> Value {
    let restarts: i64 = pod["status"]["containerStatuses"]
        .as_array()
        .map_or(0, |s| {
            s.iter().filter_map(|c| c["restartCount"].as_i64()).sum()
        });
    Value::String(restarts.to_string())
}

fn access_modes(pvc: &Value) -> Value {
    let modes = pvc["status"]["accessModes"]
        .as_array()
        .or_else(|| pvc["spec"]["accessModes"].as_array());
    let short: Vec<&str> = modes
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|mode| match mode {
            "ReadWriteOnce" => "RWO",
            "ReadOnlyMany" => "ROX",
            "ReadWriteMany" => "RWX",
            "ReadWriteOncePod" => "RWOP",
            other => other,
        })
        .collect();
    Value::String(short.join(","))
}

fn event_last_seen(event: &Value) -> Value {
    let stamp = [
        &event["lastTimestamp"],
        &event["eventTime"],
        &event["firstTimestamp"],
    ]
    .into_iter()
    .find(|stamp| stamp.is_string())
    .unwrap_or(&event["metadata"]["creationTimestamp"]);
    age(stamp)
}

/// `kind/name` of the object an Event is about, as kubectl shows it (kind in lower case).
fn event_object(event: &Value) -> Value {
    let object = &event["involvedObject"];
    let kind = object["kind"].as_str().unwrap_or_default().to_lowercase();
    let name = object["name"].as_str().unwrap_or_default();
    Value::String(format!("{kind}/{name}"))
}

/// `key=value,...` of a label map, as kubectl prints selectors.
fn labels_text(labels: &Value) -> String {
    labels
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",")
}

fn pod_selector(policy: &Value) -> Value {
    let text = labels_text(&policy["spec"]["podSelector"]["matchLabels"]);
    Value::String(if text.is_empty() {
        "<none>".into()
    } else {
        text
    })
}

fn service_ports(service: &Value) -> Value {
    let ports: Vec<String> = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP")))
        .collect();
    Value::String(if ports.is_empty() {
        "<none>".into()
    } else {
        ports.join(",")
    })
}

fn service_selector(service: &Value) -> Value {
    Value::String(labels_text(&service["spec"]["selector"]))
}

fn secret_data(secret: &Value) -> Value {
    let count = secret["data"].as_object().map_or(0, |d| d.len());
    Value::String(count.to_string())
}

/// One step of a simple JSONPath.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Field(String),
    Index(usize),
}

/// The JSONPaths a CRD's printer columns may use: `.a.b`, `.a[0]`, `.a['b.c']` (optionally in
/// `{}`); `None` for anything else.
fn parse_path(text: &str) -> Option<Vec<Segment>> {
    let text = text.trim();
    let text = text
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .unwrap_or(text);
    let mut rest = text.strip_prefix('.').unwrap_or(text);
    let mut segments = Vec::new();
    while !rest.is_empty() {
        if let Some(inner) = rest.strip_prefix('[') {
            let end = inner.find(']')?;
            let key = &inner[..end];
            rest = inner[end + 1..]
                .strip_prefix('.')
                .unwrap_or(&inner[end + 1..]);
            let quoted = key
                .strip_prefix('\'')
                .and_then(|k| k.strip_suffix('\''))
                .or_else(|| key.strip_prefix('"').and_then(|k| k.strip_suffix('"')));
            segments.push(match quoted {
                Some(field) => Segment::Field(field.to_owned()),
                None => Segment::Index(key.parse().ok()?),
            });
            continue;
        }
        // A field up to the next unescaped '.' or '['; `\.` is a dot of the name, as in
        // `.metadata.labels.cubepod\.io/pool`.
        let mut field = String::new();
        let mut chars = rest.char_indices();
        let mut end = rest.len();
        while let Some((at, c)) = chars.next() {
            match c {
                '\\' => field.push(chars.next().map_or(c, |(_, escaped)| escaped)),
                '.' | '[' => {
                    end = at;
                    break;
                }
                _ => field.push(c),
            }
        }
        if field.is_empty() {
            return None;
        }
        segments.push(Segment::Field(field));
        rest = &rest[end..];
        rest = rest.strip_prefix('.').unwrap_or(rest);
    }
    Some(segments)
}

fn lookup<'a>(value: &'a Value, path: &[Segment]) -> Option<&'a Value> {
    path.iter()
        .try_fold(value, |value, segment| match segment {
            Segment::Field(field) => value.get(field),
            Segment::Index(index) => value.get(index),
        })
        .filter(|v| !v.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_that_ask_for_a_table() {
        assert!(wanted(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        ));
        assert!(!wanted("application/json"));
        assert!(!wanted(
            "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"
        ));
    }

    #[test]
    fn json_paths_of_printer_columns() {
        let object = json!({"a": {"b.c": [1, {"d": "x"}]}, "e": null});
        let eval = |p: &str| lookup(&object, &parse_path(p).unwrap()).cloned();
        assert_eq!(eval(".a['b.c'][1].d"), Some(json!("x")));
        assert_eq!(eval("{.a['b.c'][0]}"), Some(json!(1)));
        // A label key's dots escaped, as printer columns write them.
        assert_eq!(eval(".a.b\\.c[1].d"), Some(json!("x")));
        assert_eq!(eval(".e"), None);
        assert_eq!(eval(".missing.deeper"), None);
        assert!(parse_path(".a..b").is_none());
    }

    #[test]
    fn a_sandbox_row_has_its_crd_columns() {
        let three_hours_ago =
            jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() - 3 * 3600)
                .unwrap()
                .to_string();
        let sandbox = json!({
            "metadata": {"name": "dev", "creationTimestamp": three_hours_ago,
                         "labels": {"cubepod.io/pool": "python-pool"}},
            "spec": {"desiredState": "Running", "rootfsGeneration": 2},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "shutdownIn": "5h"},
        });
        let table = render(Resource::Sandbox, &[&sandbox], "7", IncludeObject::Metadata);
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "Name",
                "Phase",
                "Desired",
                "Gen",
                "Pod IP",
                "Fork Of",
                "Pool",
                "Claims From",
                "Shutdown-in",
                "Age"
            ]
        );
        let cells = &table["rows"][0]["cells"];
        assert_eq!(cells[0], "dev");
        assert_eq!(cells[1], "Running");
        assert_eq!(cells[3], 2);
        assert_eq!(cells[5], Value::Null);
        // A pool member: its pool, from its label.
        assert_eq!(cells[6], "python-pool");
        assert_eq!(cells[7], Value::Null);
        assert_eq!(cells[8], "5h");
        assert_eq!(cells[9], "3h");
        assert_eq!(table["rows"][0]["object"]["metadata"]["name"], "dev");
    }

    #[test]
    fn an_event_row_names_its_object() {
        let event = json!({
            "metadata": {"name": "dev.1"},
            "involvedObject": {"kind": "Sandbox", "name": "dev"},
            "type": "Warning", "reason": "InvalidSpec", "message": "no image", "count": 2,
            "lastTimestamp": jiff::Timestamp::now().to_string(),
        });
        let table = render(Resource::Event, &[&event], "1", IncludeObject::None);
        let cells = &table["rows"][0]["cells"];
        assert!(cells[0].as_str().unwrap().ends_with('s'), "{cells}");
        assert_eq!(cells[1], "Warning");
        assert_eq!(cells[3], "sandbox/dev");
        assert_eq!(cells[5], "2");
        assert_eq!(cells[6], "dev.1");
    }

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(130), "2m10s");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(3 * 86400), "3d");
    }
}

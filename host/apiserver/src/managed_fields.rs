//! Field ownership as kube-apiserver keeps it (structured-merge-diff): `metadata.managedFields`,
//! one entry per manager and operation holding the fields it owns in FieldsV1 notation
//! (`f:name`, `k:{"name":"c"}`, `v:"x"`, `.`); a server-side apply's merge, its removal of the
//! fields the manager applied before and omits now, and its conflicts; and the takeover of the
//! fields any other write changes.
//!
//! The writes the controller makes in-process (through [`cubepod_kube::Cluster`]) are not
//! tracked: they name no manager, and ownership is the API's notion for its clients.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::meta;
use super::shape::{ListKind, Shape};
use cubepod_kube::{ApiError, ApiErrorKind, Resource, StatusCause};

/// A set of field paths in FieldsV1's notation: children keyed by their path element, and
/// `member` when the node's own path is in the set (`.`, or a leaf's `{}`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldSet {
    member: bool,
    children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    fn leaf() -> FieldSet {
        FieldSet {
            member: true,
            children: BTreeMap::new(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    /// Reads FieldsV1; what is not an object is the empty set.
    pub(crate) fn from_fields_v1(value: &Value) -> FieldSet {
        let mut set = FieldSet::default();
        let Some(fields) = value.as_object() else {
            return set;
        };
        for (element, child) in fields {
            if element == "." {
                set.member = true;
                continue;
            }
            let mut parsed = FieldSet::from_fields_v1(child);
            if child.as_object().is_some_and(Map::is_empty) {
                parsed.member = true;
            }
            set.children.insert(element.clone(), parsed);
        }
        set
    }

    pub(crate) fn to_fields_v1(&self) -> Value {
        let mut fields = Map::new();
        if self.member && !self.children.is_empty() {
            fields.insert(".".into(), Value::Object(Map::new()));
        }
        for (element, child) in &self.children {
            fields.insert(element.clone(), child.to_fields_v1());
        }
        Value::Object(fields)
    }

    fn union(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (element, child) in &other.children {
            self.children
                .entry(element.clone())
                .or_default()
                .union(child);
        }
    }

    fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut children = BTreeMap::new();
        for (element, child) in &self.children {
            let rest = match other.children.get(element) {
                Some(theirs) => child.difference(theirs),
                None => child.clone(),
            };
            if !rest.is_empty() {
                children.insert(element.clone(), rest);
            }
        }
        FieldSet {
            member: self.member && !other.member,
            children,
        }
    }

    fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut children = BTreeMap::new();
        for (element, child) in &self.children {
            if let Some(theirs) = other.children.get(element) {
                let both = child.intersection(theirs);
                if !both.is_empty() {
                    children.insert(element.clone(), both);
                }
            }
        }
        FieldSet {
            member: self.member && other.member,
            children,
        }
    }

    /// Each member's path, as the API server prints it (`.spec.containers[name="c"].image`).
    fn paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect_paths(&mut String::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut String, out: &mut Vec<String>) {
        if self.member {
            out.push(prefix.clone());
        }
        for (element, child) in &self.children {
            let length = prefix.len();
            prefix.push_str(&print_element(element));
            child.collect_paths(prefix, out);
            prefix.truncate(length);
        }
    }
}

/// A path element as structured-merge-diff prints it in a path.
fn print_element(element: &str) -> String {
    if let Some(name) = element.strip_prefix("f:") {
        return format!(".{name}");
    }
    if let Some(keys) = element.strip_prefix("k:") {
        let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(keys) else {
            return format!("[{keys}]");
        };
        let pairs: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
        return format!("[{}]", pairs.join(","));
    }
    if let Some(value) = element.strip_prefix("v:") {
        return format!("[={value}]");
    }
    element.to_owned()
}

/// Which kind of write a manager made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    Apply,
    Update,
}

impl Operation {
    const fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// Who writes, as a write's `managedFields` entry names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Manager {
    pub(crate) name: String,
    pub(crate) operation: Operation,
    /// `status` for a write of the status subresource.
    pub(crate) subresource: Option<&'static str>,
}

/// One `metadata.managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    manager: String,
    operation: Operation,
    api_version: String,
    time: Option<String>,
    subresource: Option<String>,
    fields: FieldSet,
}

impl Entry {
    fn read(value: &Value) -> Option<Entry> {
        let text = |field: &str| value.get(field).and_then(Value::as_str).map(str::to_owned);
        let operation = match value.get("operation").and_then(Value::as_str)? {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            _ => return None,
        };
        Some(Entry {
            manager: text("manager").unwrap_or_default(),
            operation,
            api_version: text("apiVersion").unwrap_or_default(),
            time: text("time"),
            subresource: text("subresource").filter(|s| !s.is_empty()),
            fields: FieldSet::from_fields_v1(value.get("fieldsV1").unwrap_or(&Value::Null)),
        })
    }

    fn to_value(&self) -> Value {
        let mut entry = Map::new();
        entry.insert("manager".into(), self.manager.clone().into());
        entry.insert("operation".into(), self.operation.as_str().into());
        entry.insert("apiVersion".into(), self.api_version.clone().into());
        if let Some(time) = &self.time {
            entry.insert("time".into(), time.clone().into());
        }
        entry.insert("fieldsType".into(), "FieldsV1".into());
        entry.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if let Some(subresource) = &self.subresource {
            entry.insert("subresource".into(), subresource.clone().into());
        }
        Value::Object(entry)
    }

    /// Whether this is `manager`'s entry: an applier has one whatever the version it applied,
    /// an updater one per version.
    fn is(&self, manager: &Manager, api_version: &str) -> bool {
        self.manager == manager.name
            && self.operation == manager.operation
            && self.subresource.as_deref() == manager.subresource
            && (manager.operation == Operation::Apply || self.api_version == api_version)
    }

    /// As the API server names a manager in a conflict.
    fn describe(&self) -> String {
        let mut text = quote(&self.manager);
        if let Some(subresource) = &self.subresource {
            text = format!("{text} with subresource {}", quote(subresource));
        }
        if self.operation == Operation::Update {
            text = format!("{text} using {}", self.api_version);
        }
        text
    }
}

fn quote(text: &str) -> String {
    Value::from(text).to_string()
}

fn entries_of(object: &Value) -> Vec<Entry> {
    meta::metadata(object)
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
        .map(|entries| entries.iter().filter_map(Entry::read).collect())
        .unwrap_or_default()
}

/// The part of an object whose fields are owned: without `apiVersion`, `kind`, the metadata
/// the server sets, and the part the write's subresource does not write.
fn tracked(resource: Resource, subresource: Option<&str>, object: &Value) -> Value {
    let mut tracked = object.clone();
    let Some(fields) = tracked.as_object_mut() else {
        return Value::Object(Map::new());
    };
    if subresource == Some("status") {
        fields.retain(|name, _| name == "status");
        return tracked;
    }
    fields.remove("apiVersion");
    fields.remove("kind");
    if super::strategy::accepts_status_patch(resource) {
        fields.remove("status");
    }
    if let Some(Value::Object(metadata)) = fields.get_mut("metadata") {
        for field in meta::SYSTEM_FIELDS {
            metadata.remove(field);
        }
        metadata.remove("managedFields");
        metadata.remove("selfLink");
        if metadata.is_empty() {
            fields.remove("metadata");
        }
    }
    tracked
}

/// Walks values with their kind's merge rules.
#[derive(Clone, Copy)]
struct Walk {
    shape: Shape,
}

impl Walk {
    /// The fields of an object's children.
    fn fields(self, object: &Value, path: &mut Vec<String>) -> FieldSet {
        let mut set = FieldSet::default();
        if let Value::Object(fields) = object {
            for (name, value) in fields {
                path.push(name.clone());
                set.children
                    .insert(format!("f:{name}"), self.node(value, path));
                path.pop();
            }
        }
        set
    }

    /// The fields of the value at `path`, its own path included where it is owned itself.
    fn node(self, value: &Value, path: &mut Vec<String>) -> FieldSet {
        match value {
            Value::Object(fields) => {
                let mut set = self.fields(value, path);
                set.member = fields.is_empty() || self.shape.is_map(path);
                set
            }
            Value::Array(items) => match self.shape.list(path) {
                ListKind::Atomic => FieldSet::leaf(),
                ListKind::Set => {
                    let mut set = FieldSet::leaf();
                    for item in items {
                        set.children.insert(format!("v:{item}"), FieldSet::leaf());
                    }
                    set
                }
                ListKind::Map(keys) => {
                    let mut set = FieldSet::default();
                    for item in items {
                        let Some(element) = key_element(item, &keys) else {
                            return FieldSet::leaf();
                        };
                        let mut owned = self.fields(item, path);
                        owned.member = true;
                        set.children.insert(element, owned);
                    }
                    set.member = items.is_empty();
                    set
                }
            },
            _ => FieldSet::leaf(),
        }
    }

    /// The fields of `new` whose values `old` does not have: what a write of `new` over `old`
    /// sets.
    fn changed(self, old: Option<&Value>, new: &Value, path: &mut Vec<String>) -> FieldSet {
        let Some(old) = old else {
            return self.node(new, path);
        };
        if old == new {
            return FieldSet::default();
        }
        match (old, new) {
            (Value::Object(before), Value::Object(after)) => {
                let mut set = FieldSet::default();
                for (name, value) in after {
                    path.push(name.clone());
                    let changed = self.changed(before.get(name), value, path);
                    path.pop();
                    if !changed.is_empty() {
                        set.children.insert(format!("f:{name}"), changed);
                    }
                }
                set
            }
            (Value::Array(before), Value::Array(after)) => match self.shape.list(path) {
                ListKind::Atomic => FieldSet::leaf(),
                ListKind::Set => {
                    let mut set = FieldSet::default();
                    for item in after.iter().filter(|item| !before.contains(item)) {
                        set.children.insert(format!("v:{item}"), FieldSet::leaf());
                    }
                    set
                }
                ListKind::Map(keys) => {
                    let mut set = FieldSet::default();
                    for item in after {
                        let Some(element) = key_element(item, &keys) else {
                            return FieldSet::leaf();
                        };
                        let previous = before
                            .iter()
                            .find(|b| key_element(b, &keys).as_ref() == Some(&element));
                        let mut changed = match previous {
                            Some(previous) => self.changed_fields(previous, item, path),
                            None => {
                                let mut owned = self.fields(item, path);
                                owned.member = true;
                                owned
                            }
                        };
                        if previous.is_none() {
                            changed.member = true;
                        }
                        if !changed.is_empty() {
                            set.children.insert(element, changed);
                        }
                    }
                    set
                }
            },
            _ => self.node(new, path),
        }
    }

    /// [`Self::changed`] of two list items' fields.
    fn changed_fields(self, old: &Value, new: &Value, path: &mut Vec<String>) -> FieldSet {
        match (old, new) {
            (Value::Object(_), Value::Object(_)) => {
                let mut set = self.changed(Some(old), new, path);
                set.member = false;
                set
            }
            _ => FieldSet::leaf(),
        }
    }

    /// `set` without the fields `value` no longer has.
    fn existing(self, set: &FieldSet, value: &Value, path: &mut Vec<String>) -> FieldSet {
        let mut kept = FieldSet {
            member: set.member,
            children: BTreeMap::new(),
        };
        for (element, child) in &set.children {
            let found = if let Some(name) = element.strip_prefix("f:") {
                value.get(name).map(|child_value| {
                    path.push(name.to_owned());
                    let kept = self.existing(child, child_value, path);
                    path.pop();
                    kept
                })
            } else if let Some(keys) = element.strip_prefix("k:") {
                find_keyed(value, keys).map(|item| self.existing(child, item, path))
            } else if let Some(item) = element.strip_prefix("v:") {
                let item = serde_json::from_str::<Value>(item).ok();
                let present = value
                    .as_array()
                    .is_some_and(|items| item.is_some_and(|i| items.contains(&i)));
                present.then(|| child.clone())
            } else {
                None
            };
            if let Some(found) = found.filter(|f| !f.is_empty()) {
                kept.children.insert(element.clone(), found);
            }
        }
        kept
    }

    /// Merges an applied configuration into the live object: objects field by field, keyed
    /// lists item by item, sets by value; anything else the applied value replaces.
    fn merge(self, live: &mut Value, applied: &Value, path: &mut Vec<String>) {
        match (live, applied) {
            (Value::Object(live), Value::Object(applied)) => {
                for (name, value) in applied {
                    if value.is_null() {
                        continue;
                    }
                    path.push(name.clone());
                    match live.get_mut(name) {
                        Some(existing) => self.merge(existing, value, path),
                        None => {
                            live.insert(name.clone(), value.clone());
                        }
                    }
                    path.pop();
                }
            }
            (Value::Array(live), Value::Array(applied)) => match self.shape.list(path) {
                ListKind::Atomic => *live = applied.clone(),
                ListKind::Set => {
                    for item in applied {
                        if !live.contains(item) {
                            live.push(item.clone());
                        }
                    }
                }
                ListKind::Map(keys) => {
                    for item in applied {
                        let element = key_element(item, &keys);
                        let existing = element.as_ref().and_then(|element| {
                            live.iter_mut()
                                .find(|l| key_element(l, &keys).as_ref() == Some(element))
                        });
                        match existing {
                            Some(existing) => self.merge(existing, item, path),
                            None => live.push(item.clone()),
                        }
                    }
                }
            },
            (live, applied) => *live = applied.clone(),
        }
    }

    /// Removes the fields of `set` from `live`; an owned map or item goes once it is empty of
    /// fields someone else keeps.
    fn remove(self, live: &mut Value, set: &FieldSet, path: &mut Vec<String>) {
        for (element, child) in &set.children {
            if let Some(name) = element.strip_prefix("f:") {
                let Value::Object(fields) = &mut *live else {
                    continue;
                };
                let Some(value) = fields.get_mut(name) else {
                    continue;
                };
                path.push(name.to_owned());
                self.remove(value, child, path);
                path.pop();
                let emptied = child.children.is_empty() || is_empty_container(value);
                if child.member && emptied {
                    fields.remove(name);
                }
            } else if let Some(keys) = element.strip_prefix("k:") {
                let Value::Array(items) = &mut *live else {
                    continue;
                };
                let Ok(Value::Object(wanted)) = serde_json::from_str::<Value>(keys) else {
                    continue;
                };
                if child.member {
                    items.retain(|item| !has_keys(item, &wanted));
                } else if let Some(item) = items.iter_mut().find(|item| has_keys(item, &wanted)) {
                    self.remove(item, child, path);
                }
            } else if let Some(value) = element.strip_prefix("v:")
                && let (Value::Array(items), Ok(value)) =
                    (&mut *live, serde_json::from_str::<Value>(value))
            {
                items.retain(|item| *item != value);
            }
        }
    }
}

fn is_empty_container(value: &Value) -> bool {
    match value {
        Value::Object(fields) => fields.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// `k:{...}` of a keyed list's item: its key fields, by name. `None` when it has none of them
/// (or is not an object).
fn key_element(item: &Value, keys: &[String]) -> Option<String> {
    let fields = item.as_object()?;
    let mut sorted: Vec<&String> = keys.iter().collect();
    sorted.sort();
    let pairs: Vec<String> = sorted
        .into_iter()
        .filter_map(|key| Some(format!("{}:{}", quote(key), fields.get(key)?)))
        .collect();
    if pairs.is_empty() {
        return None;
    }
    Some(format!("k:{{{}}}", pairs.join(",")))
}

fn has_keys(item: &Value, keys: &Map<String, Value>) -> bool {
    keys.iter().all(|(key, value)| item.get(key) == Some(value))
}

fn find_keyed<'a>(list: &'a Value, keys: &str) -> Option<&'a Value> {
    let Ok(Value::Object(wanted)) = serde_json::from_str::<Value>(keys) else {
        return None;
    };
    list.as_array()?.iter().find(|item| has_keys(item, &wanted))
}

/// What server-side apply makes of a live object.
pub(crate) struct Applied {
    /// The merged object (system fields as they were; the caller prepares and validates it).
    pub(crate) object: Value,
    entries: Vec<Entry>,
}

/// A server-side apply of `applied` by `manager` over `live` (`None`: the object is created).
/// Values that differ from fields another manager owns are conflicts, refused unless `force`,
/// which takes them over.
pub(crate) fn apply(
    resource: Resource,
    live: Option<&Value>,
    applied: &Value,
    manager: &Manager,
    force: bool,
) -> Result<Applied, ApiError> {
    let walk = Walk {
        shape: Shape::of(resource),
    };
    let subresource = manager.subresource;
    let api_version = applied
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or(resource.api_version())
        .to_owned();
    let mut entries = live.map(entries_of).unwrap_or_default();
    let applied_fields = tracked(resource, subresource, applied);
    let applied_set = walk.fields(&applied_fields, &mut Vec::new());

    let empty = Value::Object(Map::new());
    // Created: the applied configuration is the object, its name and kind included.
    let mut object = live.cloned().unwrap_or_else(|| applied.clone());
    walk.merge(&mut object, &applied_fields, &mut Vec::new());
    let before = tracked(resource, subresource, live.unwrap_or(&empty));
    let after = tracked(resource, subresource, &object);
    let changed = walk.changed(Some(&before), &after, &mut Vec::new());

    let mut conflicts = Vec::new();
    for entry in entries.iter_mut().filter(|e| !e.is(manager, &api_version)) {
        let taken = entry.fields.intersection(&changed);
        if taken.is_empty() {
            continue;
        }
        for path in taken.paths() {
            conflicts.push(StatusCause {
                reason: "FieldManagerConflict".into(),
                message: format!("conflict with {}", entry.describe()),
                field: path,
            });
        }
        entry.fields = entry.fields.difference(&taken);
    }
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(conflicts));
    }

    let mut others = FieldSet::default();
    let mut previous = FieldSet::default();
    for entry in &entries {
        if entry.is(manager, &api_version) {
            previous = entry.fields.clone();
        } else {
            others.union(&entry.fields);
        }
    }
    let removed = previous.difference(&applied_set).difference(&others);
    // The removed paths are tracked ones, which are the object's own paths.
    walk.remove(&mut object, &removed, &mut Vec::new());

    set_entry(&mut entries, manager, &api_version, applied_set);
    Ok(Applied { object, entries })
}

fn set_entry(entries: &mut Vec<Entry>, manager: &Manager, api_version: &str, fields: FieldSet) {
    let now = meta::now();
    match entries.iter_mut().find(|e| e.is(manager, api_version)) {
        Some(entry) => {
            if entry.fields != fields || entry.api_version != api_version {
                entry.time = Some(now);
            }
            entry.fields = fields;
            api_version.clone_into(&mut entry.api_version);
        }
        None => entries.push(Entry {
            manager: manager.name.clone(),
            operation: manager.operation,
            api_version: api_version.to_owned(),
            time: Some(now),
            subresource: manager.subresource.map(str::to_owned),
            fields,
        }),
    }
}

/// The API server's 409 for an apply's conflicts: one cause per field.
fn conflict_error(conflicts: Vec<StatusCause>) -> ApiError {
    let message = if let [only] = conflicts.as_slice() {
        format!(
            "Apply failed with 1 conflict: {}: {}",
            only.message, only.field
        )
    } else {
        let mut by_manager: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for conflict in &conflicts {
            let manager = conflict
                .message
                .strip_prefix("conflict with ")
                .unwrap_or(&conflict.message);
            by_manager.entry(manager).or_default().push(&conflict.field);
        }
        let mut lines = Vec::new();
        for (manager, paths) in by_manager {
            lines.push(format!("conflicts with {manager}:"));
            lines.extend(paths.into_iter().map(|path| format!("- {path}")));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    let mut error = ApiError::new(ApiErrorKind::Conflict, message);
    error.causes = conflicts;
    error
}

/// Writes the entries of an apply into the object it made, without the fields it no longer
/// has.
pub(crate) fn finish_apply(resource: Resource, applied: Applied, next: &mut Value) {
    write_entries(resource, applied.entries, next);
}

/// Records a write other than an apply by `manager`: it owns the fields it set, which the
/// other managers lose.
pub(crate) fn record_update(
    resource: Resource,
    manager: &Manager,
    current: Option<&Value>,
    next: &mut Value,
) {
    let walk = Walk {
        shape: Shape::of(resource),
    };
    let subresource = manager.subresource;
    let empty = Value::Object(Map::new());
    let before = tracked(resource, subresource, current.unwrap_or(&empty));
    let after = tracked(resource, subresource, next);
    let changed = walk.changed(Some(&before), &after, &mut Vec::new());
    let mut entries = current.map(entries_of).unwrap_or_default();
    let api_version = resource.api_version();
    for entry in entries.iter_mut().filter(|e| !e.is(manager, api_version)) {
        entry.fields = entry.fields.difference(&changed);
    }
    if !changed.is_empty() {
        let mut owned = entries
            .iter()
            .find(|e| e.is(manager, api_version))
            .map(|e| e.fields.clone())
            .unwrap_or_default();
        owned.union(&changed);
        set_entry(&mut entries, manager, api_version, owned);
    }
    write_entries(resource, entries, next);
}

/// Keeps `current`'s entries on a write that names no manager (the controller's).
pub(crate) fn keep(current: &Value, next: &mut Value) {
    let entries = meta::metadata(current).and_then(|m| m.get("managedFields").cloned());
    let metadata = meta::metadata_mut(next);
    match entries {
        Some(entries) => metadata.insert("managedFields".into(), entries),
        None => metadata.remove("managedFields"),
    };
}

fn write_entries(resource: Resource, entries: Vec<Entry>, next: &mut Value) {
    let walk = Walk {
        shape: Shape::of(resource),
    };
    let kept: Vec<Value> = entries
        .into_iter()
        .filter_map(|mut entry| {
            let part = tracked(resource, entry.subresource.as_deref(), next);
            entry.fields = walk.existing(&entry.fields, &part, &mut Vec::new());
            (!entry.fields.is_empty()).then(|| entry.to_value())
        })
        .collect();
    let metadata = meta::metadata_mut(next);
    if kept.is_empty() {
        metadata.remove("managedFields");
    } else {
        metadata.insert("managedFields".into(), Value::Array(kept));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn applier(name: &str) -> Manager {
        Manager {
            name: name.into(),
            operation: Operation::Apply,
            subresource: None,
        }
    }

    fn updater(name: &str) -> Manager {
        Manager {
            name: name.into(),
            operation: Operation::Update,
            subresource: None,
        }
    }

    fn configmap(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "m", "namespace": "ns"}, "data": data})
    }

    /// An apply, then the object as the server would store it.
    fn applied(live: Option<&Value>, config: &Value, manager: &str, force: bool) -> Value {
        let applied = apply(Resource::ConfigMap, live, config, &applier(manager), force)
            .unwrap_or_else(|error| panic!("{}", error.message));
        let mut object = applied.object.clone();
        finish_apply(Resource::ConfigMap, applied, &mut object);
        object
    }

    fn fields_of(object: &Value, manager: &str) -> Value {
        object["metadata"]["managedFields"]
            .as_array()
            .and_then(|entries| entries.iter().find(|e| e["manager"] == manager))
            .map(|e| e["fieldsV1"].clone())
            .unwrap_or(Value::Null)
    }

    #[test]
    fn fields_v1_round_trips() {
        let fields = json!({"f:data": {".": {}, "f:a": {}},
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}}}}});
        assert_eq!(FieldSet::from_fields_v1(&fields).to_fields_v1(), fields);
    }

    #[test]
    fn an_apply_owns_what_it_sets_and_removes_what_it_stops_setting() {
        let first = applied(
            None,
            &configmap(json!({"a": "1", "b": "2"})),
            "kubectl",
            false,
        );
        assert_eq!(first["data"], json!({"a": "1", "b": "2"}));
        assert_eq!(
            fields_of(&first, "kubectl"),
            json!({"f:data": {".": {}, "f:a": {}, "f:b": {}}})
        );
        let entry = &first["metadata"]["managedFields"][0];
        assert_eq!(entry["operation"], "Apply");
        assert_eq!(entry["apiVersion"], "v1");
        assert_eq!(entry["fieldsType"], "FieldsV1");
        assert!(entry["time"].is_string());

        // b is no longer applied, and nobody else owns it: it goes.
        let second = applied(
            Some(&first),
            &configmap(json!({"a": "1"})),
            "kubectl",
            false,
        );
        assert_eq!(second["data"], json!({"a": "1"}));
        assert_eq!(second["metadata"]["name"], "m");
    }

    #[test]
    fn a_field_another_manager_owns_is_a_conflict_unless_forced() {
        let mut live = configmap(json!({"policy.wasm": "old"}));
        record_update(
            Resource::ConfigMap,
            &updater("kubectl-client-side-apply"),
            None,
            &mut live,
        );
        assert_eq!(
            fields_of(&live, "kubectl-client-side-apply"),
            json!({"f:data": {".": {}, "f:policy.wasm": {}}})
        );

        let config = configmap(json!({"policy.wasm": "new"}));
        let refused = apply(
            Resource::ConfigMap,
            Some(&live),
            &config,
            &applier("kubectl"),
            false,
        )
        .err()
        .expect("a conflict");
        assert_eq!(refused.kind, ApiErrorKind::Conflict);
        assert_eq!(
            refused.message,
            "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using v1: \
             .data.policy.wasm"
        );
        assert_eq!(refused.causes[0].reason, "FieldManagerConflict");
        assert_eq!(refused.causes[0].field, ".data.policy.wasm");

        // The same value is shared, not a conflict.
        let same = applied(Some(&live), &live.clone(), "kubectl", false);
        assert_eq!(
            fields_of(&same, "kubectl-client-side-apply"),
            fields_of(&same, "kubectl")
        );

        // Forced: the applier takes the field over.
        let forced = applied(Some(&live), &config, "kubectl", true);
        assert_eq!(forced["data"]["policy.wasm"], "new");
        assert_eq!(
            fields_of(&forced, "kubectl"),
            json!({"f:data": {".": {}, "f:policy.wasm": {}}})
        );
        assert_eq!(
            fields_of(&forced, "kubectl-client-side-apply"),
            json!({"f:data": {}})
        );
    }

    #[test]
    fn a_field_another_manager_also_owns_stays_when_one_stops_applying_it() {
        let config = configmap(json!({"a": "1"}));
        let first = applied(None, &config, "one", false);
        let shared = applied(Some(&first), &config, "two", false);
        let dropped = applied(Some(&shared), &configmap(json!({})), "one", false);
        assert_eq!(dropped["data"], json!({"a": "1"}));
        assert_eq!(fields_of(&dropped, "one"), json!({"f:data": {}}));
    }

    #[test]
    fn an_update_takes_the_fields_it_changes() {
        let first = applied(
            None,
            &configmap(json!({"a": "1", "b": "2"})),
            "kubectl",
            false,
        );
        let mut next = first.clone();
        next["data"]["a"] = json!("changed");
        record_update(
            Resource::ConfigMap,
            &updater("kubectl-edit"),
            Some(&first),
            &mut next,
        );
        assert_eq!(
            fields_of(&next, "kubectl"),
            json!({"f:data": {".": {}, "f:b": {}}})
        );
        assert_eq!(
            fields_of(&next, "kubectl-edit"),
            json!({"f:data": {"f:a": {}}})
        );
        // A field removed is no one's.
        let mut removed = next.clone();
        removed["data"].as_object_mut().unwrap().remove("b");
        record_update(
            Resource::ConfigMap,
            &updater("kubectl-edit"),
            Some(&next),
            &mut removed,
        );
        assert_eq!(fields_of(&removed, "kubectl"), json!({"f:data": {}}));
    }

    #[test]
    fn keyed_lists_merge_and_are_owned_item_by_item() {
        let pod = |containers: Value| {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": containers}})
        };
        let first = apply(
            Resource::Pod,
            None,
            &pod(json!([{"name": "a", "image": "x"}])),
            &applier("one"),
            false,
        )
        .unwrap();
        let mut live = first.object.clone();
        finish_apply(Resource::Pod, first, &mut live);
        let second = apply(
            Resource::Pod,
            Some(&live),
            &pod(json!([{"name": "b", "image": "y"}])),
            &applier("two"),
            false,
        )
        .unwrap();
        let mut merged = second.object.clone();
        finish_apply(Resource::Pod, second, &mut merged);
        assert_eq!(
            merged["spec"]["containers"],
            json!([{"name": "a", "image": "x"}, {"name": "b", "image": "y"}])
        );
        assert_eq!(
            fields_of(&merged, "two"),
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"b\"}":
                {".": {}, "f:image": {}, "f:name": {}}}}})
        );
        let conflict = apply(
            Resource::Pod,
            Some(&merged),
            &pod(json!([{"name": "a", "image": "z"}])),
            &applier("two"),
            false,
        )
        .err()
        .expect("a conflict");
        assert_eq!(
            conflict.message,
            "Apply failed with 1 conflict: conflict with \"one\": .spec.containers[name=\"a\"].image"
        );
    }
}

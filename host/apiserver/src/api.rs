//! The API verbs with the API server's semantics, over [`State`]: validation, preconditions,
//! system metadata, generation, finalizers and deletion.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;

use super::errors;
use super::field::FieldError;
use super::managed_fields::{self, Applied, Manager};
use super::merge::merge_patch;
use super::meta;
use super::namespaces;
use super::schema;
use super::selector::Selector;
use super::shape::Shape;
use super::state::State;
use super::store::ObjectKey;
use super::strategic;
use super::strategy;
use super::watch::Filter;
use cubepod_kube::{
    ApiError, ApiErrorKind, ApiResult, ObjectList, PageRequest, Resource, Scope, WatchEvent,
};

/// What a write does to the object it changes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Change<'a> {
    /// A JSON merge patch (RFC 7386).
    Merge(&'a Value),
    /// A strategic merge patch (`strategic.rs`), for the built-in kinds.
    Strategic(&'a Value),
    /// The object whole, as a PUT sends it.
    Replace(&'a Value),
    /// A server-side apply of a configuration (`managed_fields.rs`).
    Apply { config: &'a Value, force: bool },
}

/// Whose fields a create records in `metadata.managedFields`.
pub(crate) enum Owner<'a> {
    /// The controller's own writes, in-process: not recorded.
    Untracked,
    /// A client's create, an `Update` of its manager.
    Manager(&'a Manager),
    /// A server-side apply that creates the object.
    Applied(Applied),
}

/// Which part of the object a patch is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Subresource {
    Main,
    Status,
}

/// A pod's grace period when its spec names none.
const DEFAULT_POD_GRACE_SECONDS: u64 = 30;

impl State {
    pub(crate) fn create(
        &mut self,
        resource: Resource,
        namespace: &str,
        object: Value,
        owner: Owner<'_>,
    ) -> ApiResult<Arc<Value>> {
        self.create_with(resource, namespace, object, None, owner)
    }

    /// [`Self::create`], the object given `uid` rather than a new one (a seed's: see
    /// [`super::MemoryCluster::insert`]).
    pub(crate) fn create_as(
        &mut self,
        resource: Resource,
        namespace: &str,
        object: Value,
        uid: Option<String>,
    ) -> ApiResult<Arc<Value>> {
        self.create_with(resource, namespace, object, uid, Owner::Untracked)
    }

    fn create_with(
        &mut self,
        resource: Resource,
        namespace: &str,
        object: Value,
        uid: Option<String>,
        owner: Owner<'_>,
    ) -> ApiResult<Arc<Value>> {
        let mut object = strategy::validate_create(resource, namespace, object)?;
        let key = ObjectKey::new(resource, namespace, meta::name(&object).unwrap_or_default());
        // A custom resource is defaulted as it is decoded, before anything else sees it.
        let crd = schema::of(resource);
        if let Some(crd) = crd {
            crd.default(&mut object);
        }
        strategy::prepare_for_create(resource, &mut object)?;
        let uid = uid.unwrap_or_else(meta::new_uid);
        let metadata = meta::metadata_mut(&mut object);
        for field in meta::SYSTEM_FIELDS {
            if !matches!(field, "name" | "namespace") {
                metadata.remove(field);
            }
        }
        metadata.insert("uid".into(), uid.clone().into());
        metadata.insert("creationTimestamp".into(), meta::now().into());
        metadata.insert("generation".into(), 1.into());
        refuse_invalid(&key, strategy::validate_sizes(resource, &object))?;
        // The API server's order: the object's validation, the namespace's existence
        // (admission), then the store's AlreadyExists.
        if let Some(crd) = crd {
            refuse_invalid(&key, crd.validate(&object, None))?;
        }
        if !self.namespaces.exists(namespace) {
            return Err(namespaces::not_found(namespace));
        }
        if self.store.get(&key).is_some() {
            return Err(errors::already_exists(resource, &key.name));
        }
        match owner {
            Owner::Untracked => {}
            Owner::Manager(manager) => {
                managed_fields::record_update(resource, manager, None, &mut object);
            }
            Owner::Applied(applied) => managed_fields::finish_apply(resource, applied, &mut object),
        }
        let stored = self.add(key.clone(), object);
        if resource == Resource::Pod {
            self.kubelet.pod_created(key, uid);
        }
        Ok(stored)
    }

    pub(crate) fn get(&self, key: &ObjectKey) -> ApiResult<Arc<Value>> {
        self.store.get(key).cloned().ok_or_else(|| not_found(key))
    }

    /// Deletes with background propagation: at once, or by setting deletionTimestamp when
    /// finalizers (or a running pod's grace period) must finish first.
    pub(crate) fn delete(&mut self, key: &ObjectKey) -> ApiResult<()> {
        let current = self.get(key)?;
        if meta::is_deleting(&current) {
            return Ok(());
        }
        let graceful_pod = key.resource == Resource::Pod && self.kubelet.stops_gracefully();
        if !graceful_pod && meta::finalizers(&current).is_empty() {
            self.remove(key, (*current).clone());
            return Ok(());
        }
        let grace = if graceful_pod {
            current
                .pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_u64)
                .unwrap_or(DEFAULT_POD_GRACE_SECONDS)
        } else {
            0
        };
        let mut next = (*current).clone();
        meta::set(&mut next, "deletionTimestamp", meta::now());
        meta::set(&mut next, "deletionGracePeriodSeconds", grace);
        let uid = meta::uid(&next).unwrap_or_default().to_owned();
        self.update(key.clone(), next, current);
        if graceful_pod {
            self.kubelet.pod_deleting(key.clone(), uid);
        }
        Ok(())
    }

    /// A JSON merge patch of the object or of its status.
    pub(crate) fn patch(
        &mut self,
        key: &ObjectKey,
        patch: &Value,
        subresource: Subresource,
    ) -> ApiResult<Arc<Value>> {
        self.write(key, Change::Merge(patch), subresource, None)
    }

    /// A change of the object or of its status, by `manager` (whose fields `metadata.
    /// managedFields` records) or by the controller (`None`, not recorded). A server-side
    /// apply of an object that does not exist creates it.
    pub(crate) fn write(
        &mut self,
        key: &ObjectKey,
        change: Change<'_>,
        subresource: Subresource,
        manager: Option<&Manager>,
    ) -> ApiResult<Arc<Value>> {
        if subresource == Subresource::Status && !strategy::accepts_status_patch(key.resource) {
            return Err(errors::no_such_subresource());
        }
        let current = match (self.get(key), &change, manager) {
            (Ok(current), _, _) => current,
            (Err(missing), Change::Apply { config, force }, Some(manager))
                if missing.is(ApiErrorKind::NotFound) && subresource == Subresource::Main =>
            {
                check_applied(key, config)?;
                let applied = managed_fields::apply(key.resource, None, config, manager, *force)?;
                let object = applied.object.clone();
                return self.create(
                    key.resource,
                    &key.namespace,
                    object,
                    Owner::Applied(applied),
                );
            }
            (Err(error), _, _) => return Err(error),
        };
        let mut next = (*current).clone();
        let mut applied = None;
        match change {
            Change::Merge(patch) => {
                if !patch.is_object() {
                    return Err(errors::bad_request("a merge patch must be a JSON object"));
                }
                check_preconditions(key, &current, patch)?;
                merge_patch(&mut next, patch);
            }
            Change::Strategic(patch) => {
                check_preconditions(key, &current, patch)?;
                strategic::patch(Shape::of(key.resource), &mut next, patch)
                    .map_err(|error| errors::bad_request(error.to_string()))?;
            }
            Change::Replace(object) => {
                if !object.is_object() {
                    return Err(errors::bad_request(
                        "the body of an update must be a JSON object",
                    ));
                }
                check_preconditions(key, &current, object)?;
                next = object.clone();
            }
            Change::Apply { config, force } => {
                let Some(manager) = manager else {
                    return Err(errors::bad_request("an apply names its field manager"));
                };
                check_applied(key, config)?;
                check_preconditions(key, &current, config)?;
                let merged =
                    managed_fields::apply(key.resource, Some(&*current), config, manager, force)?;
                next = merged.object.clone();
                applied = Some(merged);
            }
        }
        match subresource {
            // The status endpoint writes status only: everything else stays as it was.
            Subresource::Status => {
                let status = next.get("status").cloned();
                next = (*current).clone();
                copy_field(&mut next, "status", status);
            }
            // And where there is one, the main resource cannot write status.
            Subresource::Main if strategy::has_status_subresource(key.resource) => {
                copy_field(&mut next, "status", current.get("status").cloned());
            }
            Subresource::Main => {}
        }
        restore_system_fields(&current, &mut next);
        strategy::prepare_for_update(key.resource, &mut next)?;
        check_finalizers(key, &current, &next)?;
        refuse_invalid(key, strategy::validate_sizes(key.resource, &next))?;
        // The object the patch makes is decoded (defaulted) and validated as an update, whichever
        // part the patch was for: a status is held to the status schema too.
        if let Some(crd) = schema::of(key.resource) {
            crd.default(&mut next);
            refuse_invalid(key, crd.validate(&next, Some(&current)))?;
        }
        if current.get("spec") != next.get("spec") {
            let generation = meta::metadata(&current)
                .and_then(|m| m.get("generation"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            meta::set(&mut next, "generation", generation + 1);
        }
        match (applied, manager) {
            (Some(applied), _) => managed_fields::finish_apply(key.resource, applied, &mut next),
            (None, Some(manager)) => {
                managed_fields::record_update(key.resource, manager, Some(&*current), &mut next);
            }
            (None, None) => managed_fields::keep(&current, &mut next),
        }

        // As etcd: a write that changes nothing is not a write (no new version, no event).
        if next == *current {
            return Ok(current);
        }
        let uid = meta::uid(&next).unwrap_or_default();
        if meta::is_deleting(&next)
            && meta::finalizers(&next).is_empty()
            && !self.kubelet.is_terminating(uid)
        {
            return Ok(self.remove(key, next));
        }
        Ok(self.update(key.clone(), next, current))
    }

    pub(crate) fn list(&self, scope: &Scope) -> ApiResult<ObjectList> {
        let selector = parse_selector(scope)?;
        let items = self
            .store
            .scan(scope.resource, &scope.namespace)
            .filter(|object| selector.matches(object))
            .map(|object| (**object).clone())
            .collect();
        Ok(ObjectList {
            items,
            resource_version: self.store.resource_version().to_string(),
            continue_token: None,
        })
    }

    /// A page of [`Self::list`]. The continue token names the snapshot's version and the last
    /// object sent; the next page goes on from there with the objects as they are now, which a
    /// watch from the snapshot's version then brings up to date (objects changed meanwhile are
    /// seen twice, never missed).
    pub(crate) fn list_page(&self, scope: &Scope, page: &PageRequest) -> ApiResult<ObjectList> {
        let selector = parse_selector(scope)?;
        let (snapshot, after) = match page.continue_token.as_deref() {
            None => (self.store.resource_version().to_string(), None),
            Some(token) => {
                let mut parts = token.splitn(3, '/');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some(version), Some(ns), Some(name)) if version.parse::<u64>().is_ok() => {
                        (version.to_string(), Some((ns, name)))
                    }
                    _ => {
                        return Err(ApiError::new(
                            ApiErrorKind::Invalid,
                            format!("continue token {token:?} is not one this server issued"),
                        ));
                    }
                }
            }
        };
        let limit = usize::try_from(page.limit).unwrap_or(usize::MAX).max(1);
        let scan: Box<dyn Iterator<Item = &std::sync::Arc<Value>>> = match after {
            None => Box::new(self.store.scan(scope.resource, &scope.namespace)),
            Some(after) => Box::new(
                self.store
                    .scan_after(scope.resource, &scope.namespace, after),
            ),
        };
        let mut matching = scan.filter(|object| selector.matches(object));
        let items: Vec<Value> = matching
            .by_ref()
            .take(limit)
            .map(|object| (**object).clone())
            .collect();
        let continue_token = match (items.last(), matching.next()) {
            (Some(last), Some(_)) => Some(format!(
                "{snapshot}/{}/{}",
                meta::namespace(last).unwrap_or_default(),
                meta::name(last).unwrap_or_default()
            )),
            _ => None,
        };
        Ok(ObjectList {
            items,
            resource_version: snapshot,
            continue_token,
        })
    }

    /// Changes after `resource_version` (`""` or `"0"`: from now).
    pub(crate) fn watch(
        &mut self,
        scope: &Scope,
        resource_version: &str,
    ) -> ApiResult<mpsc::Receiver<ApiResult<WatchEvent>>> {
        let selector = parse_selector(scope)?;
        let after = match resource_version {
            "" | "0" => self.store.resource_version(),
            text => text
                .parse::<u64>()
                .map_err(|_| errors::bad_request(format!("invalid resourceVersion: {text:?}")))?,
        };
        let filter = Filter {
            resource: scope.resource,
            namespace: scope.namespace.clone(),
            selector,
        };
        Ok(self.hub.subscribe(filter, after))
    }
}

fn not_found(key: &ObjectKey) -> ApiError {
    errors::not_found(key.resource, &key.name)
}

/// The Invalid error of a custom resource's field errors, if it has any.
fn refuse_invalid(key: &ObjectKey, errors: Vec<FieldError>) -> ApiResult<()> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors::invalid(key.resource, &key.name, &errors))
    }
}

fn parse_selector(scope: &Scope) -> ApiResult<Selector> {
    Selector::parse(scope.label_selector.as_deref().unwrap_or_default())
        .map_err(|error| errors::bad_request(error.to_string()))
}

/// `metadata.resourceVersion` and `metadata.uid` in a patch are preconditions; a name or
/// namespace that is not the object's is a bad request.
fn check_preconditions(key: &ObjectKey, current: &Value, patch: &Value) -> ApiResult<()> {
    let wanted = |field| {
        patch
            .get("metadata")
            .and_then(|m| m.get(field))
            .and_then(Value::as_str)
    };
    if let Some(version) = wanted("resourceVersion")
        && Some(version) != meta::resource_version(current)
    {
        return Err(errors::conflict(key.resource, &key.name));
    }
    if let Some(uid) = wanted("uid")
        && Some(uid) != meta::uid(current)
    {
        return Err(errors::uid_precondition(
            uid,
            meta::uid(current).unwrap_or_default(),
        ));
    }
    for (field, actual) in [("name", &key.name), ("namespace", &key.namespace)] {
        if let Some(given) = wanted(field)
            && given != actual
        {
            return Err(errors::bad_request(format!(
                "the {field} of the object ({given}) does not match the {field} on the URL ({actual})"
            )));
        }
    }
    Ok(())
}

/// An applied configuration names the object's kind and the object of the URL.
fn check_applied(key: &ObjectKey, config: &Value) -> ApiResult<()> {
    if !config.is_object() {
        return Err(errors::bad_request(
            "an applied configuration must be an object",
        ));
    }
    let resource = key.resource;
    for (field, expected) in [
        ("apiVersion", resource.api_version()),
        ("kind", resource.kind()),
    ] {
        match config.get(field).and_then(Value::as_str) {
            None | Some("") => {
                return Err(errors::bad_request(format!(
                    "{field} must be set in an applied configuration"
                )));
            }
            Some(given) if given != expected => {
                return Err(errors::bad_request(format!(
                    "the {field} of the applied configuration ({given}) does not match the \
                     {field} of the URL ({expected})"
                )));
            }
            Some(_) => {}
        }
    }
    match meta::name(config) {
        Some(name) if name == key.name => Ok(()),
        given => Err(errors::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({})",
            given.unwrap_or_default(),
            key.name
        ))),
    }
}

/// Clients cannot write the fields the server owns, nor change `kind` or `apiVersion`.
fn restore_system_fields(current: &Value, next: &mut Value) {
    for field in ["kind", "apiVersion"] {
        copy_field(next, field, current.get(field).cloned());
    }
    let before = meta::metadata(current);
    let metadata = meta::metadata_mut(next);
    for field in meta::SYSTEM_FIELDS {
        match before.and_then(|m| m.get(field)) {
            Some(value) => metadata.insert(field.into(), value.clone()),
            None => metadata.remove(field),
        };
    }
}

/// Once deletion started, finalizers may only be removed.
fn check_finalizers(key: &ObjectKey, current: &Value, next: &Value) -> ApiResult<()> {
    if !meta::is_deleting(current) {
        return Ok(());
    }
    let before = meta::finalizers(current);
    match meta::finalizers(next)
        .into_iter()
        .find(|f| !before.contains(f))
    {
        Some(added) => Err(errors::invalid(
            key.resource,
            &key.name,
            &[FieldError::forbidden(
                "metadata.finalizers",
                format!(
                    "no new finalizers can be added if the object is being deleted, found new \
                     finalizers [\"{added}\"]"
                ),
            )],
        )),
        None => Ok(()),
    }
}

/// Sets or removes a top-level field.
fn copy_field(object: &mut Value, field: &str, value: Option<Value>) {
    let fields = meta::object_mut(object);
    match value {
        Some(value) => fields.insert(field.into(), value),
        None => fields.remove(field),
    };
}

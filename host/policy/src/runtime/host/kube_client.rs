//! The `kube-client` import: every call is counted against the call's budget, passes the
//! boundary (namespaces, kinds, names) and the containment rules of the call's Sandbox, then
//! goes to the cluster under a timeout; what it did is kept for the caller (effects, call
//! records, observer). A refusal is logged, counted and answered as `kube-error::refused`;
//! past the calls budget the guest traps.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::HostState;
use crate::containment::rates::{Deferral, Take};
use crate::containment::{
    CallFacts, ChildHeld, KEPT_PREFIX, NAME_CONFLICT, Refusal, Rule, clip, describe,
};
use crate::runtime::bindings::{self, KubeError, RetryAfter};
use crate::runtime::budget::MANIFEST_PARSE_CHARGE;
use crate::runtime::context::{Effect, HostCallRecord, KubeCall};
use cubepod_kube::{ApiError, ApiErrorKind, BoxFuture, Cluster, Resource, fast_path};

/// The delay a guest is told to wait after a host call that timed out.
const TIMEOUT_RETRY_MS: u64 = 1000;
/// The delay for an Unavailable answer that did not say when to retry.
const UNAVAILABLE_RETRY_MS: u64 = 1000;
/// The delay a guest is told to wait after a write the controller's bound of what policies
/// wrote deferred: room comes back as other sandboxes' objects shrink or go.
const BOUND_RETRY_MS: u64 = 30_000;

/// What an import answers: the outer error traps the guest (a budget spent).
type Answer<T> = wasmtime::Result<Result<T, KubeError>>;

impl HostState {
    /// Logs one `kube-client` call for [`GuestCall::calls`](crate::runtime::GuestCall::calls),
    /// taking the guest's strings as they came (no copy). Of a refused call only a prefix of
    /// the manifest is kept (a refused one may be huge).
    fn log<T>(
        &mut self,
        op: &'static str,
        namespace: String,
        name: String,
        manifest: Option<String>,
        result: Result<T, KubeError>,
    ) -> Result<T, KubeError> {
        let refused = matches!(result, Err(KubeError::Refused(_)));
        let manifest = manifest.map(|m| if refused { kept(m) } else { m });
        self.calls.push(KubeCall {
            op,
            namespace: kept(namespace),
            name: kept(name),
            manifest,
            result: result.as_ref().map(drop).map_err(Clone::clone),
        });
        result
    }

    fn observe(&self, record: HostCallRecord) {
        if let Some(observer) = self.ctx.as_ref().and_then(|c| c.observer.as_ref()) {
            observer(record);
        }
    }

    /// Counts a call against the budget; past it, the guest traps and nothing more is sent.
    fn count(&mut self, resource: Resource, verb: &'static str) -> wasmtime::Result<()> {
        self.host_calls = self.host_calls.saturating_add(1);
        let max = self.containment.max_kube_calls;
        if self.host_calls <= max {
            return Ok(());
        }
        let message =
            format!("more than {max} kube-client calls in one policy call (--max-kube-calls)");
        tracing::warn!(%resource, verb, rule = %Rule::Budget, max, "a policy went past its calls budget");
        self.observe(HostCallRecord {
            verb,
            resource,
            duration: Duration::ZERO,
            result: "refused",
            refused: true,
            rule: Some(Rule::Budget),
        });
        self.budget_exceeded = Some(message.clone());
        Err(wasmtime::Error::msg(message))
    }

    /// Charges the calls' memory budget for a manifest the host parses and keeps until the
    /// call ends (its parsed value, the text sent, the object the API returns); past the
    /// budget, the guest traps (reason `memory`). One past its size bound is refused before
    /// it is parsed: only its bound is charged.
    fn charge_manifest(&mut self, manifest: &str) -> wasmtime::Result<()> {
        let held = manifest.len().min(self.containment.max_manifest_bytes);
        if self
            .limits
            .charge
            .grow(held.saturating_mul(MANIFEST_PARSE_CHARGE))
        {
            return Ok(());
        }
        self.limits.budget_refused = true;
        tracing::debug!(
            bytes = manifest.len(),
            budget = self.limits.charge.budget().limit(),
            "the calls' memory budget cannot cover a manifest"
        );
        Err(wasmtime::format_err!(
            "the policy calls' memory budget cannot cover a manifest of {} bytes",
            manifest.len()
        ))
    }

    /// An `ensure-*`: create the object, AlreadyExists being success when what exists is
    /// this Sandbox's own (its controller reference to the Sandbox's uid, as the API answers
    /// it now); anything else of that name is a name conflict, never adopted. On success the
    /// last effect is the object as the API returned it.
    async fn ensure(
        &mut self,
        resource: Resource,
        namespace: &str,
        name: &str,
        manifest: &str,
    ) -> Result<Ensured, KubeError> {
        self.admit(resource, "create", namespace, name, Some(manifest))?;
        self.within_bound(resource, namespace, name, manifest)?;
        self.within_rate(resource, namespace, name, manifest.len())?;
        // The text the boundary read is the text sent (one copy; the call record keeps the
        // guest's own).
        let text = manifest.to_string();
        match self
            .request(resource, "create", namespace, name, |cluster| {
                fast_path::create_text(cluster, resource, namespace, text)
            })
            .await?
        {
            Ok(created) => {
                self.applied(resource, namespace, name, created);
                Ok(Ensured::Created)
            }
            Err(e) if e.is(ApiErrorKind::AlreadyExists) => {
                tracing::debug!(%resource, namespace, name, "already exists");
                let existing = self.read_existing(resource, namespace, name).await?;
                if !self.is_own(&existing) {
                    return Err(self.name_conflict(resource, namespace, name, &existing));
                }
                self.applied(resource, namespace, name, existing);
                Ok(Ensured::Existed)
            }
            Err(e) => Err(kube_error(e)),
        }
    }

    /// The object a create found existing, as the API has it now. Gone meanwhile, the guest
    /// is told to try again at once.
    async fn read_existing(
        &mut self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> Result<Value, KubeError> {
        match self
            .request(resource, "get", namespace, name, |cluster| {
                cluster.get(resource, namespace, name)
            })
            .await?
        {
            Ok(object) => Ok(object),
            Err(e) if e.is(ApiErrorKind::NotFound) => Err(KubeError::Retryable(RetryAfter {
                delay_ms: 1,
                message: format!(
                    "{}: deleted between its create and its read; create it again",
                    describe(resource, namespace, name)
                ),
            })),
            Err(e) => Err(kube_error(e)),
        }
    }

    /// Whether `object` is the call's Sandbox's own child: labelled for it, with its
    /// controller reference to the Sandbox's uid. A label anyone who may create the object
    /// can write; the uid is the API server's.
    fn is_own(&self, object: &Value) -> bool {
        let Some(scope) = &self.scope else {
            return false;
        };
        let labelled = crate::model::meta::MetaView::of(object)
            .label(crate::model::names::SANDBOX_LABEL)
            == Some(scope.name.as_str());
        labelled
            && !scope.uid.is_empty()
            && crate::model::children::controller_uid(object) == Some(scope.uid.as_str())
    }

    /// An object of a child's name that is not the Sandbox's: left alone, remembered for the
    /// Sandbox's Warning Event and condition, and the guest's `conflict` error.
    fn name_conflict(
        &mut self,
        resource: Resource,
        namespace: &str,
        name: &str,
        object: &Value,
    ) -> KubeError {
        let sandbox = self.scope.as_ref().map(|s| s.name.as_str()).unwrap_or("");
        let whose = match crate::model::children::controller_uid(object) {
            Some(_) => "its controller reference is to another object".to_string(),
            None => "it has no controller reference to the Sandbox".to_string(),
        };
        let message = format!(
            "{} exists and is not Sandbox {sandbox:?}'s ({whose}): the controller does not \
             adopt, mount, report or delete it; rename or remove it, or give the Sandbox \
             another name",
            describe(resource, namespace, name)
        );
        self.note_name_conflict(resource, &message);
        KubeError::Conflict(format!("{NAME_CONFLICT}: {message}"))
    }

    fn note_name_conflict(&mut self, resource: Resource, message: &str) {
        tracing::warn!(%resource, "{NAME_CONFLICT}: {message}");
        if !self.name_conflicts.iter().any(|m| m == message) {
            self.name_conflicts.push(message.to_string());
        }
    }

    /// A `delete-*`: NotFound is success. Sent only for what the cache holds as the
    /// Sandbox's child (or this call wrote); what the cache does not hold is taken as gone.
    async fn delete(
        &mut self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> Result<(), KubeError> {
        self.admit(resource, "delete", namespace, name, None)?;
        if self.held_by_stranger(resource, namespace, name) {
            let sandbox = self
                .scope
                .as_ref()
                .map(|s| s.name.clone())
                .unwrap_or_default();
            let message = format!(
                "{} is labelled as Sandbox {sandbox:?}'s but has no controller reference to it: \
                 the controller does not delete it",
                describe(resource, namespace, name)
            );
            self.note_name_conflict(resource, &message);
            return Ok(());
        }
        if !self.deletable(resource, namespace, name)? {
            tracing::debug!(%resource, namespace, name, "not in the cache: nothing to delete");
            return Ok(());
        }
        match self
            .request(resource, "delete", namespace, name, |cluster| {
                cluster.delete(resource, namespace, name)
            })
            .await?
        {
            Ok(()) => {}
            Err(e) if e.is(ApiErrorKind::NotFound) => {}
            Err(e) => return Err(kube_error(e)),
        }
        self.effects.push(Effect::Deleted {
            resource,
            namespace: namespace.to_string(),
            name: name.to_string(),
        });
        Ok(())
    }

    /// Whether this call already wrote the object (its create or patch answered).
    fn written(&self, resource: Resource, namespace: &str, name: &str) -> bool {
        self.effects.iter().any(|e| {
            matches!(e, Effect::Applied { resource: r, namespace: n, name: m, .. }
                if *r == resource && n == namespace && m == name)
        })
    }

    /// Whether an object that exists may be patched by an apply: this sandbox's own child,
    /// written earlier in this call, held by the cache, or (without a cache) among the input's
    /// observed children. Refused when the cache holds it as another sandbox's.
    fn held_as_own(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> Result<bool, KubeError> {
        match (&self.ctx, &self.scope) {
            (Some(ctx), Some(scope)) if ctx.children.is_none() => {
                let written = self.written(resource, namespace, name);
                Ok(written
                    || scope
                        .observed
                        .iter()
                        .any(|(r, n)| *r == resource && n == name))
            }
            _ => self.deletable(resource, namespace, name),
        }
    }

    /// Whether the cache holds an object of this name labelled as the call's Sandbox's
    /// without its controller reference: a stranger's, never deleted or patched for it.
    fn held_by_stranger(&self, resource: Resource, namespace: &str, name: &str) -> bool {
        let (Some(ctx), Some(scope)) = (&self.ctx, &self.scope) else {
            return false;
        };
        !self.written(resource, namespace, name)
            && ctx.children.as_ref().is_some_and(|cache| {
                cache.child(resource, namespace, name, &scope.name, &scope.uid)
                    == ChildHeld::Stranger
            })
    }

    /// Whether an admitted delete is sent: `Ok(false)` for what the cache does not hold.
    fn deletable(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> Result<bool, KubeError> {
        let (Some(ctx), Some(scope)) = (&self.ctx, &self.scope) else {
            return Ok(false);
        };
        if self.written(resource, namespace, name) {
            return Ok(true);
        }
        let held = ctx
            .children
            .as_ref()
            .map(|cache| cache.child(resource, namespace, name, &scope.name, &scope.uid));
        scope
            .check_held(resource, namespace, name, held)
            .map_err(|refusal| self.refuse("delete", resource, refusal))
    }

    /// The boundary's and the containment rules' verdict on a call.
    fn admit(
        &mut self,
        resource: Resource,
        verb: &'static str,
        namespace: &str,
        name: &str,
        manifest: Option<&str>,
    ) -> Result<(), KubeError> {
        self.verdict(resource, namespace, name, manifest)
            .map_err(|refusal| self.refuse(verb, resource, refusal))
    }

    fn verdict(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        manifest: Option<&str>,
    ) -> Result<(), Refusal> {
        let call = match (&self.ctx, &self.scope) {
            (Some(ctx), Some(scope)) => Some((&*ctx.boundary, scope)),
            _ => None,
        };
        self.containment
            .check_call(call, resource, namespace, name, manifest, self)
    }
}

impl CallFacts for HostState {
    /// What this call last did to an object: `Some(true)` written, `Some(false)` deleted,
    /// `None` neither.
    fn last_done(&self, resource: Resource, namespace: &str, name: &str) -> Option<bool> {
        self.effects.iter().rev().find_map(|e| match e {
            Effect::Applied {
                resource: r,
                namespace: n,
                name: m,
                ..
            } if *r == resource && n == namespace && m == name => Some(true),
            Effect::Deleted {
                resource: r,
                namespace: n,
                name: m,
            } if *r == resource && n == namespace && m == name => Some(false),
            _ => None,
        })
    }

    /// Whether the call's Sandbox holds `resource` `name` as its own child, as the cache says
    /// (or, without one, the input's observed children): one lookup.
    fn held(&self, resource: Resource, namespace: &str, name: &str) -> bool {
        let (Some(ctx), Some(scope)) = (&self.ctx, &self.scope) else {
            return false;
        };
        match &ctx.children {
            Some(cache) => cache.holds(resource, namespace, name, &scope.name, &scope.uid),
            None => scope
                .observed
                .iter()
                .any(|(r, n)| *r == resource && n == name),
        }
    }
}

impl HostState {
    /// Charges an admitted write of `bytes` to its Sandbox's write rate
    /// (`--max-write-bytes-per-minute`, across calls). Past it the write is not sent: the
    /// guest is told to retry when the rate allows, the call keeps the deferral for the
    /// reconcile core (which requeues the Sandbox then, and tells it once), and the observer
    /// counts it.
    fn within_rate(
        &mut self,
        resource: Resource,
        namespace: &str,
        name: &str,
        bytes: usize,
    ) -> Result<(), KubeError> {
        let (Some(ctx), Some(scope)) = (&self.ctx, &self.scope) else {
            return Ok(());
        };
        let sandbox = crate::model::ObjectRef::new(&scope.namespace, &scope.name);
        let rates = &self.containment.rates;
        let Take::Deferred { wait, first } = rates.take_write(&ctx.write_rates, &sandbox, bytes)
        else {
            return Ok(());
        };
        let what = describe(resource, namespace, name);
        self.observe(HostCallRecord {
            verb: "create",
            resource,
            duration: Duration::ZERO,
            result: "deferred",
            refused: false,
            rule: None,
        });
        let deferral = self.deferred.get_or_insert(Deferral {
            wait,
            first: false,
            what: what.to_string(),
            count: 0,
        });
        deferral.wait = deferral.wait.max(wait);
        deferral.first |= first;
        deferral.count += 1;
        let delay_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        Err(KubeError::Retryable(RetryAfter {
            delay_ms,
            message: format!(
                "{what}: deferred: Sandbox {sandbox} is past its write rate of {} bytes a \
                 minute (--max-write-bytes-per-minute); retry in {delay_ms} ms",
                rates.write_bytes_per_minute
            ),
        }))
    }

    /// Whether the controller may keep what this write leaves it holding
    /// ([`ChildLookup::room`](crate::runtime::ChildLookup::room)): past its bound the write is
    /// not sent, the guest is told to retry later, and the observer counts it (`bounded`).
    fn within_bound(
        &mut self,
        resource: Resource,
        namespace: &str,
        name: &str,
        manifest: &str,
    ) -> Result<(), KubeError> {
        let (Some(ctx), Some(scope)) = (&self.ctx, &self.scope) else {
            return Ok(());
        };
        let Some(cache) = ctx.children.as_ref() else {
            return Ok(());
        };
        let Err(why) = cache.room(resource, namespace, &scope.name, name, manifest) else {
            return Ok(());
        };
        self.observe(HostCallRecord {
            verb: "create",
            resource,
            duration: Duration::ZERO,
            result: "bounded",
            refused: false,
            rule: None,
        });
        Err(KubeError::Retryable(RetryAfter {
            delay_ms: BOUND_RETRY_MS,
            message: format!(
                "{}: deferred: {why}; retry in {BOUND_RETRY_MS} ms",
                describe(resource, namespace, name)
            ),
        }))
    }

    /// Logs and counts a refusal, and turns it into the guest's error.
    fn refuse(&self, verb: &'static str, resource: Resource, refusal: Refusal) -> KubeError {
        tracing::warn!(
            %resource,
            verb,
            rule = %refusal.rule,
            field = %refusal.field,
            what = %refusal.what,
            reason = %refusal.reason,
            "refused a policy's call"
        );
        self.observe(HostCallRecord {
            verb,
            resource,
            duration: Duration::ZERO,
            result: "refused",
            refused: true,
            rule: Some(refusal.rule),
        });
        KubeError::Refused(refusal.to_string())
    }

    /// One request to the cluster, bounded by the host-call timeout; the outer error is the
    /// timeout (or the missing context), the inner one the API's answer.
    async fn request<T, F>(
        &mut self,
        resource: Resource,
        verb: &'static str,
        namespace: &str,
        name: &str,
        send: F,
    ) -> Result<Result<T, ApiError>, KubeError>
    where
        F: for<'c> FnOnce(&'c dyn Cluster) -> BoxFuture<'c, Result<T, ApiError>>,
    {
        let Some(ctx) = self.ctx.clone() else {
            return Err(KubeError::Refused(format!(
                "{verb} {resource} {namespace}/{name}: this export may not call the cluster"
            )));
        };
        let started = Instant::now();
        let timeout = self.host_call_timeout;
        // Awaited where the call runs: epochs do not interrupt a guest waiting here, so the
        // timeout bounds it.
        let answer = tokio::time::timeout(timeout, send(ctx.cluster.as_ref())).await;
        let duration = started.elapsed();
        self.in_host_calls += duration;
        let result = match &answer {
            Ok(Ok(_)) => "ok",
            Ok(Err(e)) => e.kind.label(),
            Err(_) => "timeout",
        };
        self.observe(HostCallRecord {
            verb,
            resource,
            duration,
            result,
            refused: false,
            rule: None,
        });
        answer.map_err(|_| {
            tracing::warn!(%resource, verb, namespace, name, ?timeout, "cluster did not answer a policy's call in time");
            KubeError::Retryable(RetryAfter {
                delay_ms: TIMEOUT_RETRY_MS,
                message: format!(
                    "{verb} {resource} {namespace}/{name}: the API server did not answer within {timeout:?}"
                ),
            })
        })
    }

    fn applied(&mut self, resource: Resource, namespace: &str, name: &str, object: Value) {
        self.tell_cache(resource, &object);
        self.effects.push(Effect::Applied {
            resource,
            namespace: namespace.to_string(),
            name: name.to_string(),
            object,
        });
    }

    /// The controller's cache takes a write's answer before the guest goes on.
    fn tell_cache(&self, resource: Resource, object: &Value) {
        if let Some(cache) = self.ctx.as_ref().and_then(|ctx| ctx.children.as_ref()) {
            cache.written(resource, object);
        }
    }

    /// An `apply-*`: create the object, or when it exists replace its labels, annotations
    /// and spec with the manifest's in one JSON merge patch, so that it is never absent in
    /// between (a Pod is never without its NetworkPolicy). A merge patch merges objects, so
    /// the top-level spec fields a policy may write and the manifest leaves out are patched
    /// to null: the object then holds exactly what the boundary admitted.
    async fn apply(
        &mut self,
        resource: Resource,
        namespace: &str,
        name: &str,
        manifest: &str,
    ) -> Result<(), KubeError> {
        self.admit(resource, "create", namespace, name, Some(manifest))?;
        self.within_bound(resource, namespace, name, manifest)?;
        self.within_rate(resource, namespace, name, manifest.len())?;
        let text = manifest.to_string();
        let created = self
            .request(resource, "create", namespace, name, |cluster| {
                fast_path::create_text(cluster, resource, namespace, text)
            })
            .await?;
        match created {
            Ok(created) => {
                self.applied(resource, namespace, name, created);
                return Ok(());
            }
            // Patched in place only when it is this sandbox's own child: an object of the same
            // name that a user made (a Service `<s>` of theirs) is never taken over.
            Err(e) if e.is(ApiErrorKind::AlreadyExists) => {
                let own = !self.held_by_stranger(resource, namespace, name)
                    && self.held_as_own(resource, namespace, name)?;
                if !own {
                    let existing = self.read_existing(resource, namespace, name).await?;
                    if !self.is_own(&existing) {
                        return Err(self.name_conflict(resource, namespace, name, &existing));
                    }
                }
            }
            Err(e) => return Err(kube_error(e)),
        }
        let object: Value = serde_json::from_str(manifest).map_err(|e| {
            KubeError::Refused(format!(
                "{}: the manifest is not JSON: {e}",
                describe(resource, namespace, name)
            ))
        })?;
        let patch = replacing_patch(resource, &object);
        match self
            .request(resource, "patch", namespace, name, |cluster| {
                cluster.patch(resource, namespace, name, patch)
            })
            .await?
        {
            Ok(patched) => {
                self.applied(resource, namespace, name, patched);
                Ok(())
            }
            Err(e) => Err(kube_error(e)),
        }
    }

    /// A child's `ensure-*` or `apply-*`, as its descriptor says it is written: counted,
    /// charged, sent, and logged under the contract's name of the call. `answer` makes the
    /// guest's answer once the write succeeded (an `ensure-pod`'s is the Pod's IP).
    async fn write_child<T>(
        &mut self,
        resource: Resource,
        namespace: String,
        name: String,
        manifest: String,
        answer: fn(&Self) -> T,
    ) -> Answer<T> {
        self.count(resource, "create")?;
        self.charge_manifest(&manifest)?;
        // Every kind the contract's calls name is a child (any other is refused before it is
        // sent, by the boundary).
        let child = resource.child();
        let op = child.map_or(resource.plural(), |child| child.write_call);
        let written = if child.is_some_and(|child| child.applied) {
            self.apply(resource, &namespace, &name, &manifest).await
        } else {
            self.ensure(resource, &namespace, &name, &manifest)
                .await
                .map(drop)
        };
        let result = written.map(|()| answer(self));
        Ok(self.log(op, namespace, name, Some(manifest), result))
    }

    /// A child's `delete-*`: counted, sent, and logged under the contract's name of the call.
    async fn delete_child(
        &mut self,
        resource: Resource,
        namespace: String,
        name: String,
    ) -> Answer<()> {
        self.count(resource, "delete")?;
        let op = resource
            .child()
            .map_or(resource.plural(), |child| child.delete_call);
        let result = self.delete(resource, &namespace, &name).await;
        Ok(self.log(op, namespace, name, None, result))
    }

    /// The host's own NetworkPolicy for a module whose contract has none (0.1), applied
    /// before the module runs: through the same boundary, cluster and effects as a policy's
    /// apply, outside the module's calls budget and call log.
    pub(crate) async fn apply_host_network_policy(
        &mut self,
        namespace: &str,
        name: &str,
        manifest: &str,
    ) -> Result<(), KubeError> {
        self.apply(Resource::NetworkPolicy, namespace, name, manifest)
            .await
    }

    /// The host's delete of that NetworkPolicy in cleanup, under the same rule as a policy's:
    /// only once the Pod is gone.
    pub(crate) async fn delete_host_network_policy(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<(), KubeError> {
        self.delete(Resource::NetworkPolicy, namespace, name).await
    }

    /// The Pod's IP after an ensure: from the object the API answered to the create, or read
    /// back when it existed (and is this Sandbox's own).
    fn pod_ip(&self) -> Option<String> {
        match self.effects.last() {
            Some(Effect::Applied { object, .. }) => object
                .pointer("/status/podIP")
                .and_then(Value::as_str)
                .filter(|ip| !ip.is_empty())
                .map(str::to_string),
            _ => None,
        }
    }
}

/// The merge patch an `apply-*` sends for an object that exists: the manifest's labels,
/// annotations and spec, with the spec fields a policy writes and this manifest leaves out
/// set to null (RFC 7386 would keep them otherwise).
fn replacing_patch(resource: Resource, manifest: &Value) -> Value {
    let owned = resource.child().map_or(&[][..], |child| child.spec_fields);
    let mut spec = manifest
        .get("spec")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for key in owned {
        spec.entry(*key).or_insert(Value::Null);
    }
    // Labels and annotations the manifest has are set; those of others on the object stay.
    let mut metadata = serde_json::Map::new();
    for key in ["labels", "annotations"] {
        if let Some(value) = manifest.pointer(&format!("/metadata/{key}")) {
            metadata.insert(key.to_string(), value.clone());
        }
    }
    serde_json::json!({"metadata": metadata, "spec": spec})
}

/// A guest's string as a call record keeps it: whole when short, else its clipped prefix.
fn kept(text: String) -> String {
    if text.len() <= KEPT_PREFIX {
        text
    } else {
        clip(&text, KEPT_PREFIX)
    }
}

/// What an `ensure-*` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ensured {
    Created,
    Existed,
}

/// The API's answer in the contract's terms, the API's message kept.
fn kube_error(e: ApiError) -> KubeError {
    match e.kind {
        ApiErrorKind::NotFound => KubeError::NotFound(e.message),
        ApiErrorKind::AlreadyExists | ApiErrorKind::Conflict => KubeError::Conflict(e.message),
        ApiErrorKind::Invalid => KubeError::Invalid(e.message),
        ApiErrorKind::Unavailable => KubeError::Retryable(RetryAfter {
            delay_ms: e
                .retry_after
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(UNAVAILABLE_RETRY_MS),
            message: e.message,
        }),
        ApiErrorKind::Forbidden
        | ApiErrorKind::Unauthorized
        | ApiErrorKind::Gone
        | ApiErrorKind::Other => KubeError::Other(e.message),
    }
}

impl bindings::cubepod::controller::types::Host for HostState {}

impl bindings::cubepod::controller::kube_client::Host for HostState {
    async fn ensure_pvc(
        &mut self,
        namespace: String,
        name: String,
        manifest: String,
    ) -> Answer<()> {
        self.write_child(
            Resource::PersistentVolumeClaim,
            namespace,
            name,
            manifest,
            |_| (),
        )
        .await
    }

    async fn delete_pvc(&mut self, namespace: String, name: String) -> Answer<()> {
        self.delete_child(Resource::PersistentVolumeClaim, namespace, name)
            .await
    }

    async fn ensure_pod(
        &mut self,
        namespace: String,
        name: String,
        manifest: String,
    ) -> Answer<Option<String>> {
        self.write_child(Resource::Pod, namespace, name, manifest, Self::pod_ip)
            .await
    }

    async fn delete_pod(&mut self, namespace: String, name: String) -> Answer<()> {
        self.delete_child(Resource::Pod, namespace, name).await
    }

    async fn ensure_secret(
        &mut self,
        namespace: String,
        name: String,
        manifest: String,
    ) -> Answer<()> {
        self.write_child(Resource::Secret, namespace, name, manifest, |_| ())
            .await
    }

    async fn delete_secret(&mut self, namespace: String, name: String) -> Answer<()> {
        self.delete_child(Resource::Secret, namespace, name).await
    }

    async fn apply_network_policy(
        &mut self,
        namespace: String,
        name: String,
        manifest: String,
    ) -> Answer<()> {
        self.write_child(Resource::NetworkPolicy, namespace, name, manifest, |_| ())
            .await
    }

    async fn delete_network_policy(&mut self, namespace: String, name: String) -> Answer<()> {
        self.delete_child(Resource::NetworkPolicy, namespace, name)
            .await
    }

    async fn apply_service(
        &mut self,
        namespace: String,
        name: String,
        manifest: String,
    ) -> Answer<()> {
        self.write_child(Resource::Service, namespace, name, manifest, |_| ())
            .await
    }

    async fn delete_service(&mut self, namespace: String, name: String) -> Answer<()> {
        self.delete_child(Resource::Service, namespace, name).await
    }
}

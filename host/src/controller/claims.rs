//! Warm-pool claims: which member a claim holds, and which it is offered.
//!
//! A member is the cluster's, not this process's: what a claim holds is read from the member
//! (its `cubepod.io/claimed-by` label, written with the adoption), so an adoption whose claim
//! status was not written yet, or a restart between the two, loses nothing. What a claim is
//! offered is this process's: every reconcile in flight holds a reservation of the one member
//! it was offered, so concurrent claims are offered disjoint members and a burst of N claims
//! on N ready members makes N adoptions and no conflict. The adoption itself is conditional on
//! the member's version as offered (unclaimed), so that a member another replica or an
//! earlier leader took meanwhile is never taken again.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use foldhash::HashMap;

use super::cache::{Cache, standing};
use super::membership::Standing;
use cubepod_policy_host::model::ObjectRef;
use cubepod_policy_host::model::sandbox::{SandboxObject, egress_name, protocol_name};
use cubepod_policy_host::runtime::bindings::{
    EgressMode, NetworkSpec, ObservedChildren, Sandbox, SandboxSpec, ServiceSpec,
};

/// The longest a pool's refill waits in a row for its claims to be served.
pub(crate) const REFILL_HOLD: Duration = Duration::from_secs(2);

/// Conflicted offers remembered at most: each is one member at one version, dropped once the
/// member moves on; the bound only matters if members are deleted right after a conflict.
const STALE_OFFERS: usize = 4096;

/// Claims in flight in this process.
#[derive(Clone, Default)]
pub struct Claims {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    /// Each member offered to a reconcile in flight, and to which claim.
    reserved: HashMap<ObjectRef, ObjectRef>,
    /// Members whose adoption at this version met a conflict: the cache has not seen the
    /// write that moved them on yet, so offering them again would only conflict again.
    stale: HashMap<ObjectRef, String>,
    /// When each claim not yet served was first seen (`cubepod_sandbox_claim_seconds`: a
    /// creation time has whole seconds only).
    seen: HashMap<ObjectRef, Instant>,
    /// Pools whose refill waits for their claims, since when.
    held_pools: HashMap<ObjectRef, Instant>,
    /// The member each claim adopted in this process, until its status names it: found
    /// again without a scan of the pool (after a restart, the scan finds it by its label).
    adopted: HashMap<ObjectRef, String>,
}

/// What a Sandbox is to the pool it names, for one reconcile.
pub enum ClaimView {
    /// Not a claim, or a claim that has children of its own (it started cold).
    Unclaimed,
    /// The member this claim adopted. `recovered`: the claim's status does not name it yet.
    Bound {
        /// The adopted member.
        member: Box<SandboxObject>,
        /// Whether the claim's status does not name it yet.
        recovered: bool,
    },
    /// A ready member reserved for this claim until the offer is dropped.
    Offered(Offer),
    /// Every ready member that suits the claim is reserved by another claim in flight: one of
    /// them may be released, so the claim looks again shortly rather than start cold.
    Wait,
    /// No ready member suits the claim: it starts cold. `mismatch`: why the ready members
    /// do not suit it, when there are some.
    None {
        /// Why the ready members do not suit the claim, if there are some.
        mismatch: Option<Mismatch>,
    },
}

/// A member offered to one claim, at the version it was offered; released when dropped.
pub struct Offer {
    pub(crate) member: String,
    pub(crate) version: String,
    member_ref: ObjectRef,
    claims: Claims,
}

impl Drop for Offer {
    fn drop(&mut self) {
        self.claims.lock().reserved.remove(&self.member_ref);
    }
}

/// A field of a claim's spec that a ready member's does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The field's path: `spec.image`.
    pub(crate) field: &'static str,
    pub(crate) claim: String,
    pub(crate) member: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is {} here and {} in the pool's members",
            self.field, self.claim, self.member
        )
    }
}

impl Claims {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every mutation is one insert or remove: a panic under the lock left it consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What `claim` holds or is offered now. `observed`: its own children, as the cache has
    /// them; a claim with any started cold and is no longer a claim.
    pub fn view(
        &self,
        cache: &Cache,
        claim: &SandboxObject,
        observed: &ObservedChildren,
    ) -> ClaimView {
        let sandbox = &claim.sandbox;
        let Some(pool) = sandbox.spec.warm_pool.as_deref() else {
            return ClaimView::Unclaimed;
        };
        // Its status names its member; else the member's label does (an adoption whose status
        // write did not happen yet).
        let me = ObjectRef::new(&sandbox.namespace, &sandbox.name);
        let held = |name: &String| {
            cache
                .sandbox(&ObjectRef::new(&sandbox.namespace, name))
                .filter(|m| holds(m, &sandbox.name))
        };
        if let Some(member) = sandbox
            .status
            .claimed_member
            .as_ref()
            .and_then(held)
            .filter(|m| recorded_by(claim, m))
        {
            self.lock().adopted.remove(&me);
            return ClaimView::Bound {
                member: Box::new(member),
                recovered: false,
            };
        }
        // Adopted by this process, its status not written yet.
        let adopted = self.lock().adopted.get(&me).cloned();
        if let Some(member) = adopted.as_ref().and_then(held) {
            return ClaimView::Bound {
                member: Box::new(member),
                recovered: true,
            };
        }
        let pool_ref = ObjectRef::new(&sandbox.namespace, pool);
        let mut inner = self.lock();
        let held = cache.visit_pool_offer(&pool_ref, &sandbox.name, |held, free| match held {
            Some(member) => Err(Box::new(member.clone())),
            None => {
                let mut scan = Scan::default();
                for member in free {
                    if scan.visit(member, sandbox, &me, &inner) {
                        break;
                    }
                }
                Ok(scan)
            }
        });
        let found = match held {
            Ok(scan) => scan,
            Err(member) => {
                inner.seen.remove(&me);
                return ClaimView::Bound {
                    member,
                    recovered: true,
                };
            }
        };
        // A claim that mirrored a member it lost since has the member's volumes in its status,
        // not children of its own: it claims again.
        let started_cold = observed.pod.is_some()
            || !observed.pvcs.is_empty()
            || (sandbox.status.rootfs_pvc.is_some() && sandbox.status.claimed_member.is_none());
        if started_cold {
            inner.seen.remove(&me);
            return ClaimView::Unclaimed;
        }
        inner.seen.entry(me.clone()).or_insert_with(Instant::now);
        if let Some((name, version)) = found.best {
            let member_ref = ObjectRef::new(&sandbox.namespace, &name);
            inner.reserved.insert(member_ref.clone(), me);
            return ClaimView::Offered(Offer {
                member: name,
                version,
                member_ref,
                claims: self.clone(),
            });
        }
        if found.reserved_elsewhere {
            return ClaimView::Wait;
        }
        inner.seen.remove(&me);
        ClaimView::None {
            mismatch: found.mismatch,
        }
    }

    /// The adoption of `offer` met a conflict: the member moved on since it was offered, and
    /// is not offered again at that version.
    pub(crate) fn conflicted(&self, offer: &Offer) {
        let mut inner = self.lock();
        if inner.stale.len() >= STALE_OFFERS {
            inner.stale.clear();
        }
        inner
            .stale
            .insert(offer.member_ref.clone(), offer.version.clone());
    }

    /// The claim adopted the member `offer` names: how long since it was first seen waiting.
    pub(crate) fn served(&self, claim: &ObjectRef, offer: &Offer) -> Option<f64> {
        let mut inner = self.lock();
        inner.adopted.insert(claim.clone(), offer.member.clone());
        inner
            .seen
            .remove(claim)
            .map(|at| at.elapsed().as_secs_f64())
    }

    /// The claim is gone: nothing is kept of it.
    pub(crate) fn forget(&self, claim: &ObjectRef) {
        let mut inner = self.lock();
        inner.seen.remove(claim);
        inner.adopted.remove(claim);
    }

    /// How long the pool `pool` should wait before its next pass, if it should: while a claim
    /// of it waits to be served and it has a ready, unclaimed member to serve it from, its
    /// refill would only compete with the claims. A pool waits [`REFILL_HOLD`] at most in a
    /// row, so that claims that never stop coming do not stop it.
    pub(crate) fn refill_waits(&self, cache: &Cache, pool: &ObjectRef) -> Option<Duration> {
        let waiting = cache.claims_waiting_on(pool);
        let mut inner = self.lock();
        if !waiting {
            inner.held_pools.remove(pool);
            return None;
        }
        let since = *inner
            .held_pools
            .entry(pool.clone())
            .or_insert_with(Instant::now);
        if since.elapsed() >= REFILL_HOLD {
            inner.held_pools.remove(pool);
            return None;
        }
        Some(super::queue::POOL_SETTLE)
    }
}

/// One pass over a pool's free members for one claim, in name order, until the first it may
/// be offered.
#[derive(Default)]
struct Scan {
    /// The first, by name, of the members the claim may be offered, at its version.
    best: Option<(String, String)>,
    /// Some member would suit but is reserved for another claim in flight.
    reserved_elsewhere: bool,
    /// Why the first ready member that does not suit does not.
    mismatch: Option<Mismatch>,
}

impl Scan {
    /// Looks at the free member `member`; true once it is the one offered.
    fn visit(
        &mut self,
        member: &SandboxObject,
        claim: &Sandbox,
        me: &ObjectRef,
        inner: &Inner,
    ) -> bool {
        let m = &member.sandbox;
        if let Some(mismatch) = mismatch(&claim.spec, &m.spec) {
            self.mismatch.get_or_insert(mismatch);
            return false;
        }
        let member_ref = ObjectRef::new(&m.namespace, &m.name);
        if inner
            .reserved
            .get(&member_ref)
            .is_some_and(|holder| holder != me)
        {
            self.reserved_elsewhere = true;
            return false;
        }
        if inner.stale.get(&member_ref) == Some(&member.resource_version) {
            // Moving on, as far as the API is concerned: wait for the cache to see it.
            self.reserved_elsewhere = true;
            return false;
        }
        self.best = Some((member_ref.name, member.resource_version.clone()));
        true
    }
}

/// Whether the claim's own status records `member` as the one the controller adopted for it:
/// by its uid (`status.claimedMemberUID`, which only the controller writes). A Sandbox that
/// carries the claim's label, its name in `claimedMember` or a controller reference to the
/// claim is not its member by that: anyone who may create a Sandbox may write those. A claim
/// whose status predates the uid finds its member as the pool's recorded member labelled for
/// it ([`Cache::visit_pool_offer`]), and records its uid then.
fn recorded_by(claim: &SandboxObject, member: &SandboxObject) -> bool {
    claim
        .claimed_member_uid
        .as_deref()
        .is_some_and(|uid| !uid.is_empty() && uid == member.sandbox.uid)
}

/// Whether `member` is labelled held by the claim `claim`, and alive. Who may trust the label
/// is the caller's to say: a member of the pool's record ([`Cache::visit_pool_offer`]), or
/// one the claim records ([`recorded_by`]).
fn holds(member: &SandboxObject, claim: &str) -> bool {
    standing(&member.sandbox) == Standing::HeldBy(claim)
}

/// Why a member made from `member`'s spec would not be the sandbox `claim` asks for, if it
/// would not. A claim's image, storage sizes and network (the CRD defaults the last two) must
/// be the member's; its resources, storage class, runtime class and Service, when it sets
/// them. Its own lifecycle (desired state, generation, idle timeout, shutdown time) is not
/// compared: it is the claim's, not the member's.
pub(crate) fn mismatch(claim: &SandboxSpec, member: &SandboxSpec) -> Option<Mismatch> {
    // Every field named, none behind `..`: a field added to the spec does not compile here
    // until someone decides whether a claim's member must match it.
    let SandboxSpec {
        image,
        cpu,
        memory,
        storage_class,
        rootfs_size,
        workspace_size,
        runtime_class,
        network:
            NetworkSpec {
                egress,
                allow_cidrs,
                deny_cidrs,
            },
        service,
        // The claim's own lifecycle, never the member's.
        desired_state: _,
        rootfs_generation: _,
        idle_timeout_seconds: _,
        shutdown_time: _,
        shutdown_policy: _,
        // How a sandbox comes to exist, which a claim answers by adopting a member.
        fork_from: _,
        warm_pool: _,
    } = claim;
    let text = |s: &String| format!("{s:?}");
    let cidrs = |c: &Vec<String>| format!("{c:?}");
    let egress_text = |e: &EgressMode| format!("{:?}", egress_name(*e));
    let service_text = |s: &ServiceSpec| {
        let ports: Vec<String> = s
            .ports
            .iter()
            .map(|p| format!("{}:{}/{}", p.name, p.port, protocol_name(p.protocol)))
            .collect();
        format!("ports [{}]", ports.join(", "))
    };
    let m = member;
    differ("spec.image", image, &m.image, text)
        .or_else(|| set("spec.resources.cpu", cpu, &m.cpu, text))
        .or_else(|| set("spec.resources.memory", memory, &m.memory, text))
        .or_else(|| {
            let field = "spec.storage.storageClassName";
            set(field, storage_class, &m.storage_class, text)
        })
        .or_else(|| {
            let field = "spec.storage.rootfsSize";
            differ(field, rootfs_size, &m.rootfs_size, text)
        })
        .or_else(|| {
            let field = "spec.storage.workspaceSize";
            differ(field, workspace_size, &m.workspace_size, text)
        })
        .or_else(|| {
            set(
                "spec.runtimeClassName",
                runtime_class,
                &m.runtime_class,
                text,
            )
        })
        .or_else(|| {
            let field = "spec.network.egress";
            differ(field, egress, &m.network.egress, egress_text)
        })
        .or_else(|| {
            let field = "spec.network.allowCIDRs";
            differ(field, allow_cidrs, &m.network.allow_cidrs, cidrs)
        })
        .or_else(|| {
            let field = "spec.network.denyCIDRs";
            differ(field, deny_cidrs, &m.network.deny_cidrs, cidrs)
        })
        .or_else(|| set("spec.service", service, &m.service, service_text))
}

/// `field` differs between the claim and the member.
fn differ<T: PartialEq>(
    field: &'static str,
    claim: &T,
    member: &T,
    show: impl Fn(&T) -> String,
) -> Option<Mismatch> {
    (claim != member).then(|| Mismatch {
        field,
        claim: show(claim),
        member: show(member),
    })
}

/// `field`, set by the claim, is not the member's.
fn set<T: PartialEq>(
    field: &'static str,
    claim: &Option<T>,
    member: &Option<T>,
    show: impl Fn(&T) -> String,
) -> Option<Mismatch> {
    let claim = claim.as_ref()?;
    match member {
        Some(member) => differ(field, claim, member, show),
        None => Some(Mismatch {
            field,
            claim: show(claim),
            member: "unset".to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::controller::cache::CacheWriter;
    use cubepod_kube::{Resource, WatchEventType};

    /// A ready member of pool `p`, as the controller creates one (the pool's record names it).
    fn member(cache: &CacheWriter, name: &str, image: &str) {
        let pool = ObjectRef::new("ns", "p");
        if cache.pool(&pool).is_none() {
            cache.apply(
                Resource::PodWarmPool,
                WatchEventType::Added,
                &json!({"apiVersion": "cubepod.io/v1alpha1", "kind": "PodWarmPool",
                    "metadata": {"name": "p", "namespace": "ns", "uid": "pool-uid",
                        "resourceVersion": "1"},
                    "spec": {"replicas": 3, "template": {"image": image}}}),
            );
        }
        let ready = json!({"type": "Ready", "status": "True", "reason": "PodReady",
            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"});
        let uid = format!("uid-{name}");
        cache.apply(
            Resource::Sandbox,
            WatchEventType::Added,
            &json!({"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1",
                    "uid": uid, "labels": {"cubepod.io/pool": "p"}},
                "spec": {"image": image},
                "status": {"phase": "Running", "conditions": [ready]}}),
        );
        cache.record_created(&pool, name, &uid);
    }

    #[test]
    fn a_sandbox_that_only_carries_a_pools_labels_is_never_offered() {
        let cache = CacheWriter::default();
        member(&cache, "p-0", "img");
        let ready = json!({"type": "Ready", "status": "True", "reason": "PodReady",
            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"});
        // A tenant's own Sandbox, labelled and owned as a member would be: first by name.
        cache.apply(
            Resource::Sandbox,
            WatchEventType::Added,
            &json!({"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                "metadata": {"name": "a-planted", "namespace": "ns", "resourceVersion": "1",
                    "uid": "tenant-uid", "labels": {"cubepod.io/pool": "p"},
                    "ownerReferences": [{"apiVersion": "cubepod.io/v1alpha1",
                        "kind": "PodWarmPool", "name": "p", "uid": "pool-uid",
                        "controller": true}]},
                "spec": {"image": "img"},
                "status": {"phase": "Running", "conditions": [ready]}}),
        );
        let claims = Claims::default();
        let view = claims.view(
            &cache,
            &claim("c", "img"),
            &cubepod_policy_host::model::children::empty(),
        );
        assert_eq!(offered(&view), Some("p-0"));
        let pool = ObjectRef::new("ns", "p");
        let members: Vec<String> = cache
            .pool_members(&pool)
            .into_iter()
            .map(|m| m.name)
            .collect();
        assert_eq!(members, ["p-0"]);
        let planted = cache
            .sandbox(&ObjectRef::new("ns", "a-planted"))
            .expect("held");
        assert_eq!(
            planted.sandbox.pool, None,
            "not a member to the policy either"
        );
    }

    #[test]
    fn a_sandbox_labelled_as_a_claims_member_is_not_its_member() {
        let cache = CacheWriter::default();
        member(&cache, "p-0", "img");
        // A tenant's Sandbox labelled claimed by c, owned by c: neither in the pool's record
        // nor in c's status.
        cache.apply(
            Resource::Sandbox,
            WatchEventType::Added,
            &json!({"apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
                "metadata": {"name": "a-planted", "namespace": "ns", "resourceVersion": "1",
                    "uid": "tenant-uid",
                    "labels": {"cubepod.io/pool": "p", "cubepod.io/claimed-by": "c"}},
                "spec": {"image": "img"}}),
        );
        let mut c = claim("c", "img");
        c.sandbox.status.claimed_member = Some("a-planted".to_string());
        c.claimed_member_uid = Some("uid-p-0".to_string());
        let claims = Claims::default();
        let view = claims.view(&cache, &c, &cubepod_policy_host::model::children::empty());
        assert_eq!(offered(&view), Some("p-0"));
    }

    fn claim(name: &str, image: &str) -> SandboxObject {
        cubepod_policy_host::model::sandbox::from_json(&json!({
            "apiVersion": "cubepod.io/v1alpha1", "kind": "Sandbox",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "2"},
            "spec": {"image": image, "warmPool": "p"},
        }))
        .expect("a claim")
    }

    fn offered(view: &ClaimView) -> Option<&str> {
        match view {
            ClaimView::Offered(offer) => Some(offer.member.as_str()),
            _ => None,
        }
    }

    #[test]
    fn concurrent_claims_are_offered_different_members_and_wait_when_all_are_taken() {
        let cache = CacheWriter::default();
        member(&cache, "p-0", "img");
        member(&cache, "p-1", "img");
        let claims = Claims::default();
        let none = cubepod_policy_host::model::children::empty();
        let a = claims.view(&cache, &claim("a", "img"), &none);
        let b = claims.view(&cache, &claim("b", "img"), &none);
        assert_eq!((offered(&a), offered(&b)), (Some("p-0"), Some("p-1")));
        // Both members are offered to claims in flight: a third waits rather than start cold.
        let c = claims.view(&cache, &claim("c", "img"), &none);
        assert!(matches!(c, ClaimView::Wait));
        // a's reconcile ends without adopting: its member is offered again.
        drop(a);
        let c = claims.view(&cache, &claim("c", "img"), &none);
        assert_eq!(offered(&c), Some("p-0"));
    }

    #[test]
    fn a_member_whose_adoption_conflicted_is_not_offered_again_at_that_version() {
        let cache = CacheWriter::default();
        member(&cache, "p-0", "img");
        let claims = Claims::default();
        let none = cubepod_policy_host::model::children::empty();
        let first = claims.view(&cache, &claim("a", "img"), &none);
        let ClaimView::Offered(offer) = &first else {
            panic!("p-0 is offered");
        };
        claims.conflicted(offer);
        drop(first);
        assert!(matches!(
            claims.view(&cache, &claim("a", "img"), &none),
            ClaimView::Wait
        ));
    }

    #[test]
    fn a_claim_no_member_suits_is_told_which_field_differs() {
        let cache = CacheWriter::default();
        member(&cache, "p-0", "python:3.12");
        let claims = Claims::default();
        let view = claims.view(
            &cache,
            &claim("a", "base:1.0"),
            &cubepod_policy_host::model::children::empty(),
        );
        let ClaimView::None {
            mismatch: Some(mismatch),
        } = view
        else {
            panic!("no member suits");
        };
        assert_eq!(mismatch.field, "spec.image");
        assert_eq!(
            mismatch.to_string(),
            "spec.image is \"base:1.0\" here and \"python:3.12\" in the pool's members"
        );
    }
}

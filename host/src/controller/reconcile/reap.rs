//! The reaper's pass over a namespace: the policy's `reap` a page of candidates at a time, each
//! admitted decision carried out over the version it saw.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Carried, Pass, Reconciler};
use crate::controller::action::ReconcileError;
use crate::controller::export::Export;
use crate::controller::policy::{Outcome, PolicySlot};
use cubepod_kube::Resource;
use cubepod_policy_host::containment::pools;
use cubepod_policy_host::model::{ObjectRef, time};
use cubepod_policy_host::runtime::bindings::{ReapAction, ReapCandidate, ReapDecision};

impl Reconciler {
    /// One reaper pass over `namespace` (only the sandboxes named in `only`, when given): the
    /// policy decides who is idle or due to shut down, a page of candidates at a time; each
    /// admitted decision (`pools::reap`) is carried out over the version it saw: an idle
    /// pause marked in the status (`idlePausedAt`) for the next reconcile to carry out, a
    /// shutdown's `desiredState: Paused`, or the Sandbox's deletion. The pass's
    /// [`Carried::reaped`] names them. A page the policy fails ends the pass: the pages before
    /// it stay marked, the next tick starts again.
    pub async fn reap(&self, namespace: &str, only: Option<&[String]>) -> Pass<()> {
        let now = self.settings.clock.now();
        // Candidates and their versions side by side, matched up only for the few the policy
        // names: a tick over every sandbox must not pay for a table of them all. In name order,
        // so that the policy sees the same pages for the same cluster.
        let mut candidates = self.cache.reap_candidates(namespace);
        if let Some(names) = only {
            candidates.retain(|(c, _)| names.contains(&c.name));
        }
        candidates.sort_unstable_by(|(a, _), (b, _)| a.name.cmp(&b.name));
        // During a canary the candidate's reaper decides for its share of the sandboxes (by
        // uid, as their reconciles), the stable module's for the rest; each page is counted.
        let canary = self.policy.canary();
        let (theirs, candidates): (Vec<_>, Vec<_>) = match &canary {
            Some(canary) => candidates.into_iter().partition(|(c, _)| {
                self.cache
                    .sandbox(&ObjectRef::new(namespace, &c.name))
                    .is_some_and(|o| canary.covers(&o.sandbox.uid))
            }),
            None => (Vec::new(), candidates),
        };
        let mut pass = self.reap_pages(namespace, now, candidates).await;
        if let Some(canary) = canary
            && !theirs.is_empty()
            && pass.outcome.is_ok()
        {
            let module = canary.module.clone();
            let theirs = PolicySlot::scope(module, self.reap_pages(namespace, now, theirs)).await;
            pass.carried.add_page(theirs.carried);
            pass.outcome = theirs.outcome;
        }
        pass
    }

    /// [`Self::reap`]'s `candidates` (in name order) a page at a time, on the module of this
    /// pass; a canary counts each page of its module's and the other's.
    pub(super) async fn reap_pages(
        &self,
        namespace: &str,
        now: i64,
        candidates: Vec<(ReapCandidate, String)>,
    ) -> Pass<()> {
        let mut carried = Carried::default();
        let (sandboxes, versions): (Vec<_>, Vec<_>) = candidates.into_iter().unzip();
        let mut sandboxes = sandboxes.into_iter();
        for versions in versions.chunks(self.settings.reap_page.max(1)) {
            let page: Vec<_> = sandboxes.by_ref().take(versions.len()).collect();
            let result = self.reap_page(namespace, now, page, versions).await;
            if let Some(canary) = self.policy.canary() {
                let candidate = Arc::ptr_eq(&canary.module, &self.policy.for_this_pass());
                let outcome = match &result {
                    Ok(_) => Outcome::Ok(None),
                    Err(error) => Outcome::of_error(error),
                };
                canary.record(None, candidate, Some(Export::Reap), outcome, None);
            }
            match result {
                Ok(page) => carried.add_page(page),
                Err(error) => return Pass::new(carried, Err(error)),
            }
        }
        Pass::new(carried, Ok(()))
    }

    /// One `reap` call over `page`, its decisions marked over `versions` (the page's own): the
    /// policy's calls and the sandboxes reaped.
    pub(super) async fn reap_page(
        &self,
        namespace: &str,
        now: i64,
        page: Vec<ReapCandidate>,
        versions: &[String],
    ) -> Result<Carried, ReconcileError> {
        let handed_namespace = namespace.to_string();
        let shadowed = self.shadowed(Export::Reap, &page);
        let call = self
            .call_guest("reap", async move |module, context| {
                let call = module
                    .reap_async(context, now, &handed_namespace, &page)
                    .await?;
                Ok(call.map(|decisions| (decisions, page)))
            })
            .await?;
        let (decisions, page) = call.value;
        if let Some((shadow, page)) = shadowed {
            let (calls, stable) = (call.calls.clone(), decisions.clone());
            let namespace = namespace.to_string();
            tokio::spawn(async move { shadow.reap(now, namespace, page, calls, stable).await });
        }
        let mut carried = Carried {
            calls: call.calls,
            ..Carried::default()
        };
        if decisions.is_empty() {
            return Ok(carried);
        }
        let handed: HashMap<&str, (&ReapCandidate, &str)> = page
            .iter()
            .zip(versions)
            .map(|(c, version)| (c.name.as_str(), (c, version.as_str())))
            .collect();
        for decision in decisions {
            // A decision about a sandbox not handed, or a shutdown that is not due, is the
            // policy's mistake, not an instruction.
            let (_, version) = match pools::reap(namespace, &decision, &handed, now) {
                Ok(handed) => *handed,
                Err(refusal) => {
                    tracing::warn!(%refusal, "reaper decision refused");
                    self.count_refusal("reap", "sandboxes", refusal.rule.label());
                    continue;
                }
            };
            let target = ObjectRef::new(&decision.namespace, &decision.name);
            if self.carry_out_reap(&target, version, &decision, now).await {
                carried.reaped.push(decision.name);
            }
        }
        Ok(carried)
    }

    /// One admitted reaper decision, over the version the decision saw: if the sandbox moved
    /// on since (its shutdown time moved, activity came), nothing is done and the next tick
    /// decides again on fresh data. True when it was carried out.
    pub(super) async fn carry_out_reap(
        &self,
        target: &ObjectRef,
        version: &str,
        decision: &ReapDecision,
        now: i64,
    ) -> bool {
        let writer = self.writer();
        let (done, action) = match decision.action {
            ReapAction::IdlePause => {
                let idle_seconds = decision.idle_seconds;
                tracing::info!(%target, idle_seconds, "pausing idle sandbox: {}", decision.reason);
                let patch = serde_json::json!({"status": {"idlePausedAt": time::format(now)}});
                let done = writer
                    .mark_status(Resource::Sandbox, target, Some(version), patch)
                    .await;
                (done, None)
            }
            ReapAction::ShutdownPause => {
                let reason = &decision.reason;
                tracing::info!(%target, "pausing for good at spec.shutdownTime: {reason}");
                (writer.pause_for_good(target, version).await, Some("pause"))
            }
            ReapAction::ShutdownDelete => {
                let reason = &decision.reason;
                tracing::info!(%target, "deleting at spec.shutdownTime: {reason}");
                (
                    writer.delete_if_unchanged(target, version).await,
                    Some("delete"),
                )
            }
        };
        match done {
            Ok(()) => {
                match action {
                    None => self.metrics.reaps.inc(),
                    Some(action) => self.metrics.shutdowns.with_label_values(&[action]).inc(),
                }
                true
            }
            Err(error) => {
                tracing::info!(%target, %error, "reaper decision not carried out this tick");
                false
            }
        }
    }
}

/// Candidates handed to one `reap` call. The work and guest memory of a call stay bounded
/// however many sandboxes a namespace holds: a page of 10,000 takes under 8 MiB of the
/// default policy's linear memory (100,000 in one call took more than 24 MiB, and more than
/// the 1 s deadline in a debug build).
pub const REAP_PAGE: usize = 10_000;

impl Carried {
    /// What a later page of the same reaper pass did, after this one's.
    fn add_page(&mut self, page: Carried) {
        self.calls.extend(page.calls);
        self.reaped.extend(page.reaped);
    }
}

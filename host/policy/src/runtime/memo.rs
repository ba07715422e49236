//! The decision memo: a module's `reconcile-sandbox` answer, kept to answer the next call with
//! the same input without instantiating the module.
//!
//! A call that made no `kube-client` call is a function of its module and its input alone: a
//! fresh instance per call, time and randomness handed in as inputs, the WASI clocks and random
//! of a policy fixed (see `host/wasi.rs`). Its answer is kept, keyed by a 128-bit keyed hash of
//! what the module was handed (the module's digest, then every field of its `reconcile-input`
//! but two), and a later call whose key is the same gets it back. The two fields, as the
//! contract allows (`wit/controller.wit`):
//! - `now`: an answer holds from its call's `now` until its `requeue-after-seconds` have passed,
//!   and for as long as the rest of the input stays the same without one. A hit's requeue is
//!   what is left of the wait, so the next call comes when the policy asked for it.
//! - `fresh-token`: a call that made no `kube-client` call created no Secret, so it did not use
//!   its credential.
//!
//! One entry per Sandbox (the answer to the latest input it was reconciled with), bounded in
//! entries and bytes; the entry dropped to make room is picked at random, as a resync visits
//! every sandbox in turn and least-recently-used would drop each entry just before its next
//! use. An answer whose status is the input's (a converged sandbox's) keeps no copy of it. The
//! memo belongs to its [`PolicyModule`](super::PolicyModule): a swap drops it with the module.
//! The controller admits a memoised answer as it admits any other (containment runs on it).

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use siphasher::sip128::{Hasher128, SipHasher13};

use super::bindings::{ReconcileInput, ReconcileOutput, SandboxStatus};

/// How much the memo of one module may keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoBounds {
    /// The most answers kept (one per Sandbox): 0 turns the memo off, every call instantiates.
    pub entries: usize,
    /// The most bytes they may take, counted as the entries' own size and their strings.
    pub bytes: usize,
}

impl Default for MemoBounds {
    /// Room for a converged answer of each of 131,072 sandboxes (about 100 bytes each), and
    /// a few thousand answers that carry a status of their own.
    fn default() -> Self {
        Self {
            entries: 1 << 17,
            bytes: 24 << 20,
        }
    }
}

/// What a module's memo has done and holds, for tests and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoStats {
    /// Calls answered from the memo.
    pub hits: u64,
    /// Calls that ran the module (the memo being on).
    pub misses: u64,
    /// Answers held.
    pub entries: usize,
    /// Their bytes, as [`MemoBounds::bytes`] counts them.
    pub bytes: usize,
}

/// What identifies a call to the memo: its Sandbox's slot, the digest of its input, its `now`.
pub(crate) struct Key {
    slot: u64,
    input: u128,
    now: i64,
}

pub(crate) struct Memo {
    bounds: MemoBounds,
    /// Hashes a Sandbox to its slot: a collision only makes two sandboxes take turns in one
    /// slot, since a hit needs the input's full digest.
    slots: RandomState,
    /// The key of the inputs' digest, drawn for this memo and never shown: a tenant, who
    /// writes much of an input, cannot make two inputs digest alike without it.
    secret: (u64, u64),
    state: Mutex<State>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Default)]
struct State {
    index: HashMap<u64, usize>,
    entries: Vec<(u64, Entry)>,
    bytes: usize,
    /// xorshift64 state, for the entry to drop.
    random: u64,
}

struct Entry {
    input: u128,
    /// The `now` of the call that answered.
    at: i64,
    /// When the answer stops holding: `at` plus its requeue; `i64::MAX` without one.
    until: i64,
    /// `None` for the answer of a converged sandbox: no requeue, no claim, no Event, and the
    /// status it was handed.
    answer: Option<Box<Answer>>,
    weight: usize,
}

struct Answer {
    /// `None`: the status the input carries.
    status: Option<SandboxStatus>,
    claim: Option<String>,
    events: Vec<super::bindings::Event>,
}

impl Memo {
    pub(crate) fn new(bounds: MemoBounds) -> Self {
        let slots = RandomState::new();
        let random = slots.hash_one("memo") | 1;
        let secret = (slots.hash_one("secret 0"), slots.hash_one("secret 1"));
        Self {
            bounds,
            slots,
            secret,
            state: Mutex::new(State {
                random,
                ..State::default()
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The call's key, `None` when the memo is off.
    pub(crate) fn key(&self, module: &str, input: &ReconcileInput) -> Option<Key> {
        if self.bounds.entries == 0 {
            return None;
        }
        let sandbox = &input.sandbox;
        Some(Key {
            slot: self
                .slots
                .hash_one((&sandbox.namespace, &sandbox.name, &sandbox.uid)),
            input: digest(self.secret, module, input),
            now: input.now,
        })
    }

    /// The answer kept for `key` if it still holds, made from `input`; else `input` back (boxed:
    /// a miss goes on to instantiate, whose cost dwarfs the box's).
    pub(crate) fn answer(
        &self,
        key: &Key,
        input: ReconcileInput,
    ) -> Result<ReconcileOutput, Box<ReconcileInput>> {
        let found = {
            let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state
                .index
                .get(&key.slot)
                .map(|&i| &state.entries[i].1)
                .filter(|e| e.input == key.input && e.at <= key.now && key.now < e.until)
                .map(|e| {
                    let requeue = (e.until != i64::MAX)
                        .then(|| u32::try_from(e.until - key.now).unwrap_or(u32::MAX));
                    let answer = e
                        .answer
                        .as_ref()
                        .map(|a| (a.status.clone(), a.claim.clone(), a.events.clone()));
                    (requeue, answer)
                })
        };
        let Some((requeue_after_seconds, answer)) = found else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return Err(Box::new(input));
        };
        self.hits.fetch_add(1, Ordering::Relaxed);
        let (status, claim, events) = answer.unwrap_or_default();
        Ok(ReconcileOutput {
            status: status.unwrap_or(input.sandbox.status),
            requeue_after_seconds,
            claim,
            events,
        })
    }

    /// Keeps `out`, the answer of a call that made no `kube-client` call to an input whose
    /// status was `handed`, for the calls with the same key.
    pub(crate) fn keep(&self, key: Key, handed: &SandboxStatus, out: &ReconcileOutput) {
        let until = match out.requeue_after_seconds {
            // Asked to be called again at once: nothing to keep.
            Some(0) => return,
            Some(seconds) => key.now.saturating_add(i64::from(seconds)),
            None => i64::MAX,
        };
        let status = (out.status != *handed).then(|| out.status.clone());
        let answer =
            (status.is_some() || out.claim.is_some() || !out.events.is_empty()).then(|| {
                Box::new(Answer {
                    status,
                    claim: out.claim.clone(),
                    events: out.events.clone(),
                })
            });
        let entry = Entry {
            input: key.input,
            at: key.now,
            until,
            weight: weight(answer.as_deref()),
            answer,
        };
        if entry.weight > self.bounds.bytes {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&i) = state.index.get(&key.slot) {
            state.remove(i);
        }
        while !state.entries.is_empty()
            && (state.entries.len() >= self.bounds.entries
                || state.bytes + entry.weight > self.bounds.bytes)
        {
            let i = state.next_random() as usize % state.entries.len();
            state.remove(i);
        }
        state.bytes += entry.weight;
        let at = state.entries.len();
        state.entries.push((key.slot, entry));
        state.index.insert(key.slot, at);
    }

    pub(crate) fn stats(&self) -> MemoStats {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        MemoStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: state.entries.len(),
            bytes: state.bytes,
        }
    }
}

impl State {
    fn remove(&mut self, i: usize) {
        let (slot, entry) = self.entries.swap_remove(i);
        self.index.remove(&slot);
        if let Some((moved, _)) = self.entries.get(i) {
            self.index.insert(*moved, i);
        }
        self.bytes -= entry.weight;
    }

    fn next_random(&mut self) -> u64 {
        let mut x = self.random;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.random = x;
        x
    }
}

/// What an entry takes: itself, its slot in the index, and what its answer holds.
fn weight(answer: Option<&Answer>) -> usize {
    let fixed = size_of::<(u64, Entry)>() + 2 * size_of::<(u64, usize)>();
    let Some(answer) = answer else {
        return fixed;
    };
    let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let status = answer.status.as_ref().map_or(0, |s| {
        size_of::<SandboxStatus>()
            + text(&s.pod_ip)
            + text(&s.rootfs_pvc)
            + text(&s.workspace_pvc)
            + text(&s.claimed_member)
            + text(&s.service_fqdn)
            + text(&s.shutdown_in)
            + s.conditions
                .iter()
                .map(|c| size_of_val(c) + c.kind.len() + c.reason.len() + c.message.len())
                .sum::<usize>()
    });
    let events: usize = answer
        .events
        .iter()
        .map(|e| size_of_val(e) + e.reason.len() + e.message.len())
        .sum();
    fixed + size_of::<Answer>() + status + text(&answer.claim) + events
}

/// The digest of what the module is handed but `now` and `fresh-token`, after the module's
/// digest: every other field, in the bindings' own `Hash` encoding (each string ended by a byte
/// no UTF-8 text holds, each list by its length, each variant by its case: no two inputs encode
/// alike), through SipHash-1-3 with 128 bits out under the memo's secret key. A memo lives in
/// one process, so the digest need not be stable across processes; keyed, its collisions cannot
/// be aimed at, and it takes a tenth of sha256's instructions on a CPU without SHA extensions.
/// A field added to the contract fails to compile here until it is placed.
fn digest(secret: (u64, u64), module: &str, input: &ReconcileInput) -> u128 {
    let ReconcileInput {
        now: _,
        fresh_token: _,
        sandbox,
        observed,
        fork_source,
        pool_candidates,
        claimed_member,
        cluster_network,
    } = input;
    let mut hasher = SipHasher13::new_with_keys(secret.0, secret.1);
    module.hash(&mut hasher);
    sandbox.hash(&mut hasher);
    observed.hash(&mut hasher);
    fork_source.hash(&mut hasher);
    pool_candidates.hash(&mut hasher);
    claimed_member.hash(&mut hasher);
    cluster_network.hash(&mut hasher);
    hasher.finish128().as_u128()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::bindings::{Event, EventType, SandboxPhase};

    fn input(name: &str, now: i64) -> ReconcileInput {
        crate::fixtures::new_sandbox_input("ns", name, now)
    }

    fn converged(input: &ReconcileInput, requeue: Option<u32>) -> ReconcileOutput {
        ReconcileOutput {
            status: input.sandbox.status.clone(),
            requeue_after_seconds: requeue,
            claim: None,
            events: Vec::new(),
        }
    }

    #[test]
    fn an_answer_holds_until_its_requeue_and_is_handed_what_is_left_of_it() {
        let memo = Memo::new(MemoBounds::default());
        let first = input("a", 1_000);
        let key = memo.key("m", &first).unwrap();
        memo.keep(key, &first.sandbox.status, &converged(&first, Some(60)));
        // Later, with another token: the same answer, its wait shortened.
        let mut later = input("a", 1_030);
        later.fresh_token = "another".to_string();
        let key = memo.key("m", &later).unwrap();
        let out = memo.answer(&key, later.clone()).expect("a hit");
        assert_eq!(out, converged(&later, Some(30)));
        // Once the wait is over, or before the answer's own time, the module is called.
        for now in [1_060, 999] {
            let at = input("a", now);
            assert!(
                memo.answer(&memo.key("m", &at).unwrap(), at).is_err(),
                "{now}"
            );
        }
        assert_eq!(
            memo.stats(),
            MemoStats {
                hits: 1,
                misses: 2,
                entries: 1,
                bytes: weight(None)
            }
        );
    }

    #[test]
    fn an_answer_of_its_own_status_and_events_is_kept_whole() {
        let memo = Memo::new(MemoBounds::default());
        let handed = input("a", 1_000);
        let mut out = converged(&handed, None);
        out.status.phase = SandboxPhase::Failed;
        out.claim = Some("member".to_string());
        out.events.push(Event {
            kind: EventType::Warning,
            reason: "Refused".to_string(),
            message: "the spec is invalid".to_string(),
        });
        memo.keep(
            memo.key("m", &handed).unwrap(),
            &handed.sandbox.status,
            &out,
        );
        let again = input("a", 5_000);
        let key = memo.key("m", &again).unwrap();
        assert_eq!(memo.answer(&key, again).ok(), Some(out));
        assert!(memo.stats().bytes > weight(None));
    }

    #[test]
    fn a_module_sandbox_or_field_not_seen_is_no_hit() {
        let memo = Memo::new(MemoBounds::default());
        let handed = input("a", 1_000);
        memo.keep(
            memo.key("m", &handed).unwrap(),
            &handed.sandbox.status,
            &converged(&handed, None),
        );
        let mut changed = input("a", 1_000);
        changed.sandbox.generation = 2;
        for (module, input) in [
            ("other", input("a", 1_000)),
            ("m", input("b", 1_000)),
            ("m", changed),
        ] {
            let key = memo.key(module, &input).unwrap();
            assert!(memo.answer(&key, input).is_err(), "{module}");
        }
    }

    #[test]
    fn each_memo_digests_under_its_own_key() {
        // A digest a tenant could compute ahead would let two inputs be made to collide.
        let handed = input("a", 1_000);
        let (one, two) = (
            Memo::new(MemoBounds::default()),
            Memo::new(MemoBounds::default()),
        );
        let digest = |memo: &Memo| memo.key("m", &handed).map(|k| k.input);
        assert_eq!(digest(&one), digest(&one));
        assert_ne!(digest(&one), digest(&two));
    }

    #[test]
    fn the_memo_keeps_within_its_bounds_and_can_be_off() {
        let bounds = MemoBounds {
            entries: 3,
            bytes: 1 << 20,
        };
        let memo = Memo::new(bounds);
        for i in 0..10 {
            let handed = input(&format!("s{i}"), 1_000);
            let key = memo.key("m", &handed).unwrap();
            memo.keep(key, &handed.sandbox.status, &converged(&handed, None));
        }
        assert_eq!(memo.stats().entries, 3);
        // The same sandbox again takes its own slot, not another.
        let handed = input("s9", 2_000);
        let key = memo.key("m", &handed).unwrap();
        memo.keep(key, &handed.sandbox.status, &converged(&handed, Some(5)));
        assert_eq!(memo.stats().entries, 3);

        let small = Memo::new(MemoBounds {
            entries: 100,
            bytes: 2 * weight(None),
        });
        for i in 0..10 {
            let handed = input(&format!("s{i}"), 1_000);
            let key = small.key("m", &handed).unwrap();
            small.keep(key, &handed.sandbox.status, &converged(&handed, None));
        }
        assert_eq!(small.stats().entries, 2);
        assert!(small.stats().bytes <= 2 * weight(None));

        let off = Memo::new(MemoBounds {
            entries: 0,
            ..MemoBounds::default()
        });
        assert!(off.key("m", &input("a", 1)).is_none());
    }
}

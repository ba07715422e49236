//! The one way a policy module gets to run, at start and in every hot swap: read the file (and,
//! with verification keys configured, its signature), verify the signature, compile and load it
//! (the contract check, against whichever supported contract the component targets, and
//! `describe`, which must name that one), then the conformance self-test on a scratch cluster. A
//! module that fails a step is refused with a reason; nothing of it has run but `describe` and
//! the self-test, both in the sandboxed runtime.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::runtime::Handle;

use crate::runtime::{DEFAULT_POLICY, PolicyEngine, PolicyModule, RuntimeError};
use crate::scenario::conformance::{self, SelfTestError};
use crate::signing::{KeyRing, SignatureError, VerifyingKey, signature_path};

/// Why a module was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("{0}")]
    Signature(#[from] SignatureError),
    #[error("{0}")]
    Load(#[from] RuntimeError),
    #[error("self-test failed: {0}")]
    SelfTest(#[from] SelfTestError),
    #[error("the check ended abnormally: {0}")]
    Panic(String),
}

/// Every `reason` a refusal can have (besides `applied`, the `result` values of
/// `cubepod_policy_swaps_total`).
pub const REFUSAL_REASONS: &[&str] = &[
    "signature_missing",
    "signature_malformed",
    "signature_invalid",
    "compile",
    "contract",
    "trap",
    "timeout",
    "memory",
    "self_test",
    "panic",
];

impl Refused {
    /// A short reason for logs and metrics, one of [`REFUSAL_REASONS`].
    pub fn reason(&self) -> &'static str {
        match self {
            Refused::Signature(error) => error.reason(),
            // The bytes are in hand by then: an I/O error cannot happen while loading them.
            Refused::Load(RuntimeError::Io { .. }) => "compile",
            Refused::Load(error) => error.metric_label(),
            Refused::SelfTest(_) => "self_test",
            Refused::Panic(_) => "panic",
        }
    }
}

/// What the signature check has to go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureFile {
    /// No key is configured, or the module is the built-in default (part of the binary,
    /// verified with it): nothing to check.
    NotChecked,
    /// The content of `<module>.sig`, or why it could not be read.
    Read {
        path: PathBuf,
        content: Result<Vec<u8>, String>,
    },
}

/// A module as read, before any check.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The file, or `built-in default`.
    pub what: String,
    pub bytes: Arc<[u8]>,
    pub signature: SignatureFile,
}

impl Candidate {
    /// The built-in default policy.
    pub fn builtin() -> Self {
        Self {
            what: "built-in default".to_string(),
            bytes: Arc::from(DEFAULT_POLICY),
            signature: SignatureFile::NotChecked,
        }
    }

    /// sha256 of the module's bytes.
    pub fn digest(&self) -> String {
        sha256_hex(&self.bytes)
    }

    /// What a verdict on this candidate depends on: the module's digest and what was read of
    /// its signature. A refusal is remembered by this, so that the same module with a new
    /// signature is checked again.
    pub fn identity(&self) -> (String, Option<String>) {
        let signature = match &self.signature {
            SignatureFile::NotChecked => None,
            SignatureFile::Read {
                content: Ok(bytes), ..
            } => Some(sha256_hex(bytes)),
            SignatureFile::Read {
                content: Err(why), ..
            } => Some(format!("unreadable: {why}")),
        };
        (self.digest(), signature)
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes))
}

/// A module that passed every step.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub module: PolicyModule,
    /// The key that verified it; `None` when no key is configured (or for the built-in).
    pub key: Option<VerifyingKey>,
    /// Conformance cases passed.
    pub cases: usize,
}

/// How much of the checks after the signature to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extent {
    /// Compile, contract and `describe` only: `policy test --no-conformance`, for the scenarios
    /// alone.
    Load,
    /// Then the conformance cases.
    Conformance(conformance::Extent),
}

/// A module that loaded, and the verdict of each conformance case that ran.
#[derive(Debug)]
pub struct Examination {
    pub module: PolicyModule,
    pub cases: Vec<conformance::Outcome>,
}

impl Examination {
    /// The module and how many cases it passed, or the first failure: what admits a module.
    pub fn verdict(self) -> Result<(PolicyModule, usize), Refused> {
        let cases = conformance::verdict(self.cases)?;
        Ok((self.module, cases))
    }
}

/// The pipeline, with the engine modules are compiled for and the keys they are verified with.
#[derive(Clone, Debug)]
pub struct Admission {
    engine: PolicyEngine,
    keys: Arc<KeyRing>,
}

impl Admission {
    pub fn new(engine: PolicyEngine, keys: KeyRing) -> Self {
        Self {
            engine,
            keys: Arc::new(keys),
        }
    }

    pub fn engine(&self) -> &PolicyEngine {
        &self.engine
    }

    pub fn keys(&self) -> &KeyRing {
        &self.keys
    }

    /// Reads the module at `path` and, when keys are configured, `<path>.sig` beside it. A
    /// module that cannot be read is an error; a signature that cannot be read is kept as such,
    /// and refuses the module when it is checked.
    pub async fn read(&self, path: &Path) -> std::io::Result<Candidate> {
        let bytes = tokio::fs::read(path).await?;
        let signature = if self.keys.is_empty() {
            SignatureFile::NotChecked
        } else {
            let sig = signature_path(path);
            let content = tokio::fs::read(&sig).await.map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => "no such file".to_string(),
                _ => e.to_string(),
            });
            SignatureFile::Read { path: sig, content }
        };
        Ok(Candidate {
            what: path.display().to_string(),
            bytes: Arc::from(bytes),
            signature,
        })
    }

    /// The signature step alone: `Ok(None)` when there is nothing to check.
    pub fn verify(&self, candidate: &Candidate) -> Result<Option<VerifyingKey>, SignatureError> {
        if self.keys.is_empty() {
            return Ok(None);
        }
        match &candidate.signature {
            SignatureFile::NotChecked => Ok(None),
            SignatureFile::Read {
                path,
                content: Err(why),
            } => Err(SignatureError::Missing {
                path: path.clone(),
                why: why.clone(),
            }),
            SignatureFile::Read {
                path,
                content: Ok(signature),
            } => self
                .keys
                .verify(&candidate.bytes, signature, path)
                .cloned()
                .map(Some),
        }
    }

    /// Every step after the signature: compile, contract, `describe`, then the conformance
    /// cases as far as `extent` says. `Err` only when the module does not load; a failed case
    /// is in the examination, for [`Examination::verdict`] to refuse. The controller (at start
    /// and in every swap), `policy test` and `policy inspect` all judge a module by this.
    /// Blocking: call it from a blocking thread; the scratch clusters run on `handle`.
    pub fn examine(
        &self,
        bytes: &[u8],
        handle: &Handle,
        extent: Extent,
    ) -> Result<Examination, Refused> {
        let module = self.engine.load(bytes)?;
        let cases = match extent {
            Extent::Load => Vec::new(),
            Extent::Conformance(extent) => conformance::run(&module, handle, extent),
        };
        Ok(Examination { module, cases })
    }

    /// The whole pipeline, blocking. The signature is checked before anything is compiled.
    pub fn check(&self, candidate: &Candidate, handle: &Handle) -> Result<Admitted, Refused> {
        let key = self.verify(candidate)?;
        let extent = Extent::Conformance(conformance::Extent::UntilFirstFailure);
        let (module, cases) = self.examine(&candidate.bytes, handle, extent)?.verdict()?;
        Ok(Admitted { module, key, cases })
    }

    /// [`Self::check`] on a blocking thread of the current runtime.
    pub async fn admit(&self, candidate: Candidate) -> Result<Admitted, Refused> {
        let admission = self.clone();
        let handle = Handle::current();
        tokio::task::spawn_blocking(move || admission.check(&candidate, &handle))
            .await
            .map_err(|e| Refused::Panic(e.to_string()))?
    }
}

//! The one way a policy module gets to run, at start and in every hot swap: read the file (and,
//! with verification keys configured, its signature), verify the signature, compile and load it
//! (the contract check, against whichever supported contract the component targets, and
//! `describe`, which must name that one), then the conformance self-test on a scratch cluster. A
//! module that fails a step is refused with a reason; nothing of it has run but `describe` and
//! the self-test, both in the sandboxed runtime.

use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;

use crate::scenario::conformance::{self, SelfTestError};
use crate::signing::{KeyRing, SignatureError, VerifyingKey, signature_path};
use cubepod_policy_host::runtime::{DEFAULT_POLICY, PolicyEngine, PolicyModule, RuntimeError};

/// Why a module was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// Its signature is missing or matches no configured key.
    #[error("{0}")]
    Signature(#[from] SignatureError),
    /// It does not compile, or breaks the contract or its `describe`.
    #[error("{0}")]
    Load(#[from] RuntimeError),
    /// It failed a built-in conformance case.
    #[error("self-test failed: {0}")]
    SelfTest(#[from] SelfTestError),
    /// The check itself panicked.
    #[error("the check ended abnormally: {0}")]
    Panic(String),
    /// The file could not be read as a module.
    #[error("{0}")]
    File(FileError),
}

/// The most a module may hold, decompressed, unless `--max-policy-bytes` says otherwise: a
/// release build of a Rust policy is a few hundred KiB and a debug build of the default policy
/// fits; a Python one (componentize-py, the interpreter included) is about 18.5 MB.
pub(crate) const DEFAULT_MAX_MODULE_BYTES: u64 = 32 << 20;

/// The first bytes of a gzip stream (RFC 1952): a module that begins with them is decompressed
/// when read, wherever it is read from. No WebAssembly binary begins with them (`\0asm`).
const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];

/// The most a `.sig` may hold: a signature is under 100 bytes of base64 (a DER ECDSA P-256
/// signature is at most 72 bytes, an Ed25519 one 64).
pub(crate) const MAX_SIGNATURE_BYTES: u64 = 4 << 10;

/// How long one read of a module or its signature may take: a file on a stuck network or
/// FUSE mount must not hold the watcher.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a module file (or its signature) was not read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Missing, or not permitted: not a refusal; the next look may find it.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// A FIFO, a device, a socket or a directory where the file should be.
    #[error("{} is {what}, not a regular file: only a regular file (or a symlink to one) is read", path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead: `a directory`.
        what: &'static str,
    },
    /// Larger than its bound.
    #[error("{} holds {size} bytes, more than the {max} a {role} may ({bound})", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size, bytes.
        size: u64,
        /// The most it may hold, bytes.
        max: u64,
        /// What the file is: `policy module`, `signature`.
        role: &'static str,
        /// Where the bound comes from: the flag that sets it, or the fixed bound.
        bound: &'static str,
    },
    /// Gzip-compressed, and larger than its bound once decompressed.
    #[error(
        "{} decompresses to more than the {max} bytes a policy module may hold ({bound})",
        path.display()
    )]
    DecompressedTooLarge {
        /// The file.
        path: PathBuf,
        /// The most a module may hold, decompressed, bytes.
        max: u64,
        /// Where the bound comes from.
        bound: &'static str,
    },
    /// Begins as gzip but does not decompress.
    #[error("{} begins as gzip but does not decompress: {why}; compress the module with gzip, or give the .wasm itself", path.display())]
    Gzip {
        /// The file.
        path: PathBuf,
        /// The decoder's error.
        why: String,
    },
    /// Its read did not finish within `READ_TIMEOUT`.
    #[error("{} was not read within {timeout:?}", path.display())]
    Timeout {
        /// The file.
        path: PathBuf,
        /// How long the read was given.
        timeout: Duration,
    },
}

impl FileError {
    /// Whether the file is refused (reason `file`) rather than just not readable now.
    pub(crate) fn is_refusal(&self) -> bool {
        !matches!(self, FileError::Io { .. })
    }
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
    "file",
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
            Refused::File(_) => "file",
        }
    }
}

/// What the signature check has to go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SignatureFile {
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
    pub(crate) what: String,
    pub(crate) bytes: Arc<[u8]>,
    pub(crate) signature: SignatureFile,
}

impl Candidate {
    /// The built-in default policy.
    pub(crate) fn builtin() -> Self {
        Self {
            what: "built-in default".to_string(),
            bytes: Arc::from(DEFAULT_POLICY),
            signature: SignatureFile::NotChecked,
        }
    }

    /// sha256 of the module's bytes.
    pub(crate) fn digest(&self) -> String {
        sha256_hex(&self.bytes)
    }

    /// What a verdict on this candidate depends on: the module's digest and what was read of
    /// its signature. A refusal is remembered by this, so that the same module with a new
    /// signature is checked again.
    pub(crate) fn identity(&self) -> (String, Option<String>) {
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

/// The sha256 of `bytes`, in hex: a module's digest.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes))
}

/// A module that passed every step.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The module, loaded.
    pub module: PolicyModule,
    /// The key that verified it; `None` when no key is configured (or for the built-in).
    pub(crate) key: Option<VerifyingKey>,
    /// Conformance cases passed.
    pub(crate) cases: usize,
    /// How long the self-test's cases took.
    pub(crate) self_tested_in: std::time::Duration,
}

impl Admitted {
    /// What the module was checked by, in words: the signature only when a key verified it.
    pub(crate) fn checks(&self) -> String {
        let tests = format!(
            "the contract check and the self-test ({} cases)",
            self.cases
        );
        match &self.key {
            Some(key) => format!("its signature by {}, {tests}", key.describe()),
            None => format!("{tests}; no signature checked (no --policy-verify-key is set)"),
        }
    }
}

/// How much of the checks after the signature to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Extent {
    /// Compile, contract and `describe` only: `policy test --no-conformance`, for the scenarios
    /// alone.
    Load,
    /// Then the conformance cases.
    Conformance(conformance::Extent),
}

/// A module that loaded, and the verdict of each conformance case that ran.
#[derive(Debug)]
pub(crate) struct Examination {
    pub(crate) module: PolicyModule,
    pub(crate) cases: Vec<conformance::Outcome>,
}

impl Examination {
    /// The module and how many cases it passed, or the first failure: what admits a module.
    pub(crate) fn verdict(self) -> Result<(PolicyModule, usize), Refused> {
        let cases = conformance::verdict(self.cases)?;
        Ok((self.module, cases))
    }
}

/// The pipeline, with the engine modules are compiled for and the keys they are verified with.
#[derive(Clone, Debug)]
pub struct Admission {
    engine: PolicyEngine,
    keys: Arc<KeyRing>,
    max_module_bytes: u64,
}

impl Admission {
    /// Admission with `engine`, verifying signatures with `keys` (none: unsigned modules pass).
    pub fn new(engine: PolicyEngine, keys: KeyRing) -> Self {
        Self {
            engine,
            keys: Arc::new(keys),
            max_module_bytes: DEFAULT_MAX_MODULE_BYTES,
        }
    }

    /// The most a module file may hold (`--max-policy-bytes`).
    pub fn with_max_module_bytes(mut self, max: u64) -> Self {
        self.max_module_bytes = max;
        self
    }

    pub(crate) fn engine(&self) -> &PolicyEngine {
        &self.engine
    }

    pub(crate) fn keys(&self) -> &KeyRing {
        &self.keys
    }

    /// Reads the module at `path` and, when keys are configured, `<path>.sig` beside it, each
    /// only if it is a regular file within its bound (`read_bounded`). A module that cannot
    /// be read is an error, a refusal (reason `file`) when it is not a file to read; a
    /// signature that is missing is kept as such, and refuses the module when it is checked.
    pub async fn read(&self, path: &Path) -> Result<Candidate, FileError> {
        let bytes = read_bounded(
            path,
            self.max_module_bytes,
            "policy module",
            "--max-policy-bytes",
        )
        .await?;
        let bytes = decompressed(bytes, path, self.max_module_bytes, "--max-policy-bytes")?;
        let signature = if self.keys.is_empty() {
            SignatureFile::NotChecked
        } else {
            let sig = signature_path(path);
            let content = match read_bounded(&sig, MAX_SIGNATURE_BYTES, "signature", "4 KiB").await
            {
                Ok(bytes) => Ok(bytes),
                Err(FileError::Io { source, .. }) => Err(match source.kind() {
                    std::io::ErrorKind::NotFound => "no such file".to_string(),
                    _ => source.to_string(),
                }),
                Err(refused) => return Err(refused),
            };
            SignatureFile::Read { path: sig, content }
        };
        Ok(Candidate {
            what: path.display().to_string(),
            bytes: Arc::from(bytes),
            signature,
        })
    }

    /// A module handed as bytes (a `PolicyRollout`'s ConfigMap), `what` naming where they come
    /// from: held to the same bounds as a file (`--max-policy-bytes`, 4 KiB for a signature),
    /// and decompressed as a file is when gzip.
    /// `signature` is what was found under the signature's key, or why nothing was; it is
    /// not looked at when no key is configured.
    pub(crate) fn candidate_of(
        &self,
        what: String,
        bytes: Vec<u8>,
        signature: (String, Result<Vec<u8>, String>),
    ) -> Result<Candidate, FileError> {
        let too_large = |path: &str, size: usize, max: u64, role, bound| FileError::TooLarge {
            path: PathBuf::from(path),
            size: size as u64,
            max,
            role,
            bound,
        };
        if bytes.len() as u64 > self.max_module_bytes {
            return Err(too_large(
                &what,
                bytes.len(),
                self.max_module_bytes,
                "policy module",
                "--max-policy-bytes",
            ));
        }
        let bytes = decompressed(
            bytes,
            Path::new(&what),
            self.max_module_bytes,
            "--max-policy-bytes",
        )?;
        let signature = if self.keys.is_empty() {
            SignatureFile::NotChecked
        } else {
            let (path, content) = signature;
            if let Ok(sig) = &content
                && sig.len() as u64 > MAX_SIGNATURE_BYTES
            {
                return Err(too_large(
                    &path,
                    sig.len(),
                    MAX_SIGNATURE_BYTES,
                    "signature",
                    "4 KiB",
                ));
            }
            SignatureFile::Read {
                path: PathBuf::from(path),
                content,
            }
        };
        Ok(Candidate {
            what,
            bytes: Arc::from(bytes),
            signature,
        })
    }

    /// The signature step alone: `Ok(None)` when there is nothing to check.
    pub(crate) fn verify(
        &self,
        candidate: &Candidate,
    ) -> Result<Option<VerifyingKey>, SignatureError> {
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
    pub(crate) fn examine(
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
    pub(crate) fn check(
        &self,
        candidate: &Candidate,
        handle: &Handle,
    ) -> Result<Admitted, Refused> {
        let key = self.verify(candidate)?;
        let extent = Extent::Conformance(conformance::Extent::UntilFirstFailure);
        let examination = self.examine(&candidate.bytes, handle, extent)?;
        let self_tested_in = examination.cases.iter().map(|case| case.duration).sum();
        let (module, cases) = examination.verdict()?;
        Ok(Admitted {
            module,
            key,
            cases,
            self_tested_in,
        })
    }

    /// `Self::check` on a blocking thread of the current runtime.
    pub async fn admit(&self, candidate: Candidate) -> Result<Admitted, Refused> {
        let admission = self.clone();
        let handle = Handle::current();
        tokio::task::spawn_blocking(move || admission.check(&candidate, &handle))
            .await
            .map_err(|e| Refused::Panic(e.to_string()))?
    }
}

/// Reads `path` whole if it is a regular file of at most `max` bytes, on a blocking thread,
/// within [`READ_TIMEOUT`]. Opened without blocking (`O_NONBLOCK`: opening a FIFO would wait
/// for a writer) and following symlinks (a ConfigMap volume's file is a symlink through
/// `..data`), then judged by what was opened (`fstat`), so that a file swapped in between is
/// not read unchecked; at most `max + 1` bytes are read, in case it grew since.
pub(crate) async fn read_bounded(
    path: &Path,
    max: u64,
    role: &'static str,
    bound: &'static str,
) -> Result<Vec<u8>, FileError> {
    let owned = path.to_path_buf();
    let read = tokio::task::spawn_blocking(move || read_file(&owned, max, role, bound));
    match tokio::time::timeout(READ_TIMEOUT, read).await {
        Ok(Ok(result)) => result,
        Ok(Err(join)) => Err(FileError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(join.to_string()),
        }),
        Err(_) => Err(FileError::Timeout {
            path: path.to_path_buf(),
            timeout: READ_TIMEOUT,
        }),
    }
}

/// `bytes` as built: decompressed when they are gzip (a module past a ConfigMap's 1 MiB, or a
/// Python one, ships compressed), else as they are. Decompression stops one byte past `max`,
/// so that a small stream that inflates to gigabytes is refused without being held. The
/// digest and the signature are over what this returns, the component as built.
pub(crate) fn decompressed(
    bytes: Vec<u8>,
    path: &Path,
    max: u64,
    bound: &'static str,
) -> Result<Vec<u8>, FileError> {
    if !bytes.starts_with(GZIP_MAGIC) {
        return Ok(bytes);
    }
    let mut out = Vec::new();
    // Multi-member: `cat a.gz b.gz` is one valid gzip file, as gunzip reads it.
    flate2::read::MultiGzDecoder::new(bytes.as_slice())
        .take(max.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| FileError::Gzip {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
    if out.len() as u64 > max {
        return Err(FileError::DecompressedTooLarge {
            path: path.to_path_buf(),
            max,
            bound,
        });
    }
    Ok(out)
}

fn read_file(
    path: &Path,
    max: u64,
    role: &'static str,
    bound: &'static str,
) -> Result<Vec<u8>, FileError> {
    let io = |source| FileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    let metadata = file.metadata().map_err(io)?;
    let kind = metadata.file_type();
    let what = if kind.is_file() {
        None
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_dir() {
        Some("a directory")
    } else if kind.is_socket() {
        Some("a socket")
    } else if kind.is_char_device() || kind.is_block_device() {
        Some("a device")
    } else {
        Some("not a file")
    };
    if let Some(what) = what {
        return Err(FileError::NotRegular {
            path: path.to_path_buf(),
            what,
        });
    }
    let too_large = |size| FileError::TooLarge {
        path: path.to_path_buf(),
        size,
        max,
        role,
        bound,
    };
    let size = metadata.len();
    if size > max {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > max {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(read_bounded(
                path,
                max,
                "policy module",
                "--max-policy-bytes",
            ))
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write as _;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn a_gzip_module_is_read_decompressed_within_the_bound_on_its_decompressed_size() {
        let module = b"\0asm\x0d\0\x01\0 a component as built".repeat(100);
        let path = Path::new("policy.wasm.gz");
        let bound = "--max-policy-bytes";
        let max = module.len() as u64;
        // As built, whether given compressed or not.
        assert_eq!(
            decompressed(gzip(&module), path, max, bound).unwrap(),
            module
        );
        assert_eq!(
            decompressed(module.clone(), path, max, bound).unwrap(),
            module
        );
        // The bound is on what it decompresses to, however small the compressed file.
        let compressed = gzip(&module);
        assert!((compressed.len() as u64) < max - 1);
        let refused = decompressed(compressed, path, max - 1, bound).unwrap_err();
        assert!(
            matches!(refused, FileError::DecompressedTooLarge { .. }),
            "{refused}"
        );
        assert!(refused.is_refusal());
        assert_eq!(
            refused.to_string(),
            format!(
                "policy.wasm.gz decompresses to more than the {} bytes a policy module may \
                 hold (--max-policy-bytes)",
                max - 1
            )
        );
        // A gzip bomb stops at the bound: 1 GiB of zeros is about 1 MiB compressed.
        let bomb = {
            use std::io::Write as _;
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            let zeros = vec![0u8; 1 << 20];
            for _ in 0..64 {
                encoder.write_all(&zeros).unwrap();
            }
            encoder.finish().unwrap()
        };
        assert!(matches!(
            decompressed(bomb, path, 1 << 20, bound),
            Err(FileError::DecompressedTooLarge { .. })
        ));
        // Cut short: refused in words.
        let mut truncated = gzip(&module);
        truncated.truncate(truncated.len() / 2);
        let refused = decompressed(truncated, path, max, bound).unwrap_err();
        assert!(
            refused
                .to_string()
                .starts_with("policy.wasm.gz begins as gzip but does not decompress"),
            "{refused}"
        );
        assert_eq!(Refused::File(refused).reason(), "file");
    }

    #[test]
    fn a_gzip_module_file_and_configmap_value_give_the_bytes_as_built() {
        let dir = tempfile::tempdir().unwrap();
        let module = b"\0asm\x0d\0\x01\0 the component".repeat(50);
        let path = dir.path().join("policy.wasm.gz");
        std::fs::write(&path, gzip(&module)).unwrap();
        let engine = PolicyEngine::new(cubepod_policy_host::runtime::RuntimeConfig {
            cache_dir: None,
            ..Default::default()
        })
        .unwrap();
        let admission = Admission::new(engine, KeyRing::default());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let candidate = runtime.block_on(admission.read(&path)).unwrap();
        assert_eq!(&candidate.bytes[..], &module[..]);
        assert_eq!(candidate.digest(), sha256_hex(&module));
        let from_map = admission
            .candidate_of(
                "ConfigMap p key policy.wasm.gz".to_string(),
                gzip(&module),
                (
                    "ConfigMap p key policy.wasm.sig".to_string(),
                    Err("none".to_string()),
                ),
            )
            .unwrap();
        assert_eq!(from_map.digest(), sha256_hex(&module));
        let small = admission.with_max_module_bytes(module.len() as u64 - 1);
        assert!(matches!(
            runtime.block_on(small.read(&path)),
            Err(FileError::DecompressedTooLarge { .. })
        ));
    }

    #[test]
    fn only_a_regular_file_within_its_bound_is_read_through_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("..2026");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("m"), b"module").unwrap();
        std::os::unix::fs::symlink("..2026", dir.path().join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/m", dir.path().join("m")).unwrap();
        assert_eq!(read(&dir.path().join("m"), 6).unwrap(), b"module");
        assert!(matches!(
            read(&dir.path().join("m"), 5),
            Err(FileError::TooLarge {
                size: 6,
                max: 5,
                ..
            })
        ));
        // A device that never ends is refused for what it is, not read.
        assert!(matches!(
            read(Path::new("/dev/zero"), 5),
            Err(FileError::NotRegular {
                what: "a device",
                ..
            })
        ));
        assert!(matches!(
            read(&data, 5),
            Err(FileError::NotRegular {
                what: "a directory",
                ..
            })
        ));
        let missing = read(&dir.path().join("gone"), 5).unwrap_err();
        assert!(!missing.is_refusal(), "{missing}");
        assert_eq!(Refused::File(read(&data, 5).unwrap_err()).reason(), "file");
    }
}

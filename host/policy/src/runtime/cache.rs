//! The precompiled-module cache (`--cache-dir`): native code that wasmtime compiled from a
//! policy, kept so that a restart does not compile the same module again.
//!
//! Loading an entry runs its bytes as native code (`Component::deserialize` trusts its input),
//! so whoever can write the directory can run code in the controller. The defence is the
//! directory itself: created private (0700), and refused (the module is compiled in memory
//! instead) unless it is owned by this process's user and writable by no one else. The
//! directory is opened once per load without following a symlink, and checked and used through
//! that handle (`/proc/self/fd/N`: Linux; elsewhere the cache is refused), so it cannot be
//! swapped for another between the check and the read.
//!
//! Entries are not authenticated with a secret (an HMAC): the key would have to live where the
//! entries live, readable by exactly those who can write them, so it would stop no one the
//! permission check lets in; and a key that lives only in the process would make the cache
//! useless across restarts, its only purpose. What an entry records instead, its module's
//! digest, the engine's (wasmtime version and compilation settings) and its payload's sha256,
//! catches the honest accidents: a file renamed or copied under another module's name, one
//! from another build of the controller, a torn or corrupted one. Such an entry is compiled
//! again and overwritten, never loaded.

use std::fs::{File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The first bytes of an entry (and its format's version).
const MAGIC: &[u8; 16] = b"cubepod-cwasm-1\n";
/// Magic, the module's sha256 in hex, the engine key, the payload's sha256.
const HEADER: usize = MAGIC.len() + 64 + 32 + 32;

/// Why the cache directory is not used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CacheRefused {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is owned by uid {owner}, not by this process's user (uid {ours})", path.display())]
    Owner {
        path: PathBuf,
        owner: u32,
        ours: u32,
    },
    #[error(
        "{} is writable by its group or by others (mode {mode:o}): anyone who can write it \
         could plant native code",
        path.display()
    )]
    Writable { path: PathBuf, mode: u32 },
}

/// What the compiled code depends on besides the module: the engine's compatibility hash
/// (target, compiler flags, tunables, wasm features, and wasmtime's version), as a sha256.
pub(crate) fn engine_key(engine: &wasmtime::Engine) -> [u8; 32] {
    let mut encoded = Encoded::default();
    engine.precompile_compatibility_hash().hash(&mut encoded);
    Sha256::digest(&encoded.0).into()
}

/// A [`Hasher`] that keeps the bytes a value's `Hash` writes, to digest them whole: stable
/// across Rust releases and processes, unlike `DefaultHasher`.
#[derive(Default)]
struct Encoded(Vec<u8>);

impl Hasher for Encoded {
    fn write(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    fn finish(&self) -> u64 {
        // Only the bytes are used.
        0
    }
}

/// The cache directory, open and checked.
pub(crate) struct CacheDir {
    /// Held open: every path below goes through it.
    _handle: File,
    /// `/proc/self/fd/<handle>`: the directory that was checked, whatever its path names now.
    through: PathBuf,
    shown: PathBuf,
}

impl CacheDir {
    /// Creates the directory (0700) if it is missing, opens it and checks who may write it.
    #[allow(unsafe_code)] // geteuid: the owner check of the cache directory.
    pub(crate) fn open(dir: &Path) -> Result<Self, CacheRefused> {
        let io = |source| CacheRefused::Io {
            path: dir.to_path_buf(),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
        let handle = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir)
            .map_err(io)?;
        let meta = handle.metadata().map_err(io)?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let ours = unsafe { libc::geteuid() };
        if meta.uid() != ours {
            return Err(CacheRefused::Owner {
                path: dir.to_path_buf(),
                owner: meta.uid(),
                ours,
            });
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o022 != 0 {
            return Err(CacheRefused::Writable {
                path: dir.to_path_buf(),
                mode,
            });
        }
        let through = PathBuf::from(format!("/proc/self/fd/{}", handle.as_raw_fd()));
        std::fs::metadata(&through).map_err(|source| CacheRefused::Io {
            path: through.clone(),
            source,
        })?;
        Ok(Self {
            _handle: handle,
            through,
            shown: dir.to_path_buf(),
        })
    }

    /// The entry's path as the user configured it, for messages.
    pub(crate) fn shown(&self, name: &str) -> PathBuf {
        self.shown.join(name)
    }

    /// The compiled code stored under `name`, if the entry records this module and engine and
    /// its payload is intact. `Ok(None)` when there is no entry; `Err` says why one is not
    /// trusted.
    pub(crate) fn read(
        &self,
        name: &str,
        digest: &str,
        engine: &[u8; 32],
    ) -> Result<Option<Vec<u8>>, String> {
        let bytes = match std::fs::read(self.through.join(name)) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("unreadable: {e}")),
        };
        if bytes.len() < HEADER || &bytes[..MAGIC.len()] != MAGIC {
            return Err("not an entry of this cache (no header)".to_string());
        }
        let (header, payload) = bytes.split_at(HEADER);
        let (recorded_digest, rest) = header[MAGIC.len()..].split_at(64);
        let (recorded_engine, recorded_payload) = rest.split_at(32);
        if recorded_digest != digest.as_bytes() {
            return Err(format!(
                "it records another module (sha256 {})",
                String::from_utf8_lossy(recorded_digest)
            ));
        }
        if recorded_engine != engine {
            return Err("it was compiled by another engine (version or settings)".to_string());
        }
        if recorded_payload != Sha256::digest(payload).as_slice() {
            return Err("its code does not match its recorded sha256 (corrupted)".to_string());
        }
        Ok(Some(payload.to_vec()))
    }

    /// Stores `compiled` under `name`, recording the module and engine, through a private
    /// temporary file and a rename so that a reader never sees half an entry.
    pub(crate) fn write(
        &self,
        name: &str,
        digest: &str,
        engine: &[u8; 32],
        compiled: &[u8],
    ) -> std::io::Result<()> {
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let temp = self
            .through
            .join(format!(".{name}.{}.{nonce}.tmp", std::process::id()));
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .and_then(|mut file| {
                file.write_all(MAGIC)?;
                file.write_all(digest.as_bytes())?;
                file.write_all(engine)?;
                file.write_all(&Sha256::digest(compiled))?;
                file.write_all(compiled)
            })
            .and_then(|()| std::fs::rename(&temp, self.through.join(name)));
        if written.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        written
    }
}

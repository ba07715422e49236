//! Signed policy modules: a detached signature beside the module (`<module>.sig`), in the format
//! `cosign sign-blob --key` writes: the base64 of a signature over the module's bytes, ECDSA
//! P-256 with SHA-256 (DER-encoded), or Ed25519 (64 bytes). Public keys are PEM SPKI ("PUBLIC
//! KEY", as `cosign generate-key-pair` exports `cosign.pub`); private keys, for `policy sign`,
//! unencrypted PEM PKCS#8 ("PRIVATE KEY"). The cryptography is RustCrypto's `p256` and
//! `ed25519-dalek`.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use ed25519_dalek::Signer as _;
use p256::ecdsa::signature::Verifier as _;
use p256::pkcs8::der::pem;
use p256::pkcs8::{DecodePrivateKey, DecodePublicKey};
use sha2::{Digest, Sha256};

/// `<module>.sig`: where a module's signature is looked for, and where `policy sign` writes it.
pub fn signature_path(module: &Path) -> PathBuf {
    let mut path = module.as_os_str().to_owned();
    path.push(".sig");
    PathBuf::from(path)
}

/// A key file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read.
    #[error("key {}: {source}", path.display())]
    Read {
        /// The key file.
        path: PathBuf,
        /// The read's error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a key of a supported kind.
    #[error("key {}: {why}", path.display())]
    Parse {
        /// The key file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

/// Why a module's signature does not admit it. Each is a `reason` of the refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// No `.sig` beside the module.
    #[error(
        "no signature {} ({why}): a verification key is configured, so only a module with a \
         valid signature beside it loads",
        path.display()
    )]
    Missing {
        /// Where the signature was looked for.
        path: PathBuf,
        /// Why it was not read.
        why: String,
    },
    /// The `.sig` is not a signature.
    #[error("signature {} is malformed: {why}", path.display())]
    Malformed {
        /// The signature file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// No configured key verifies the module with it.
    #[error(
        "signature {} does not verify this module with any configured key ({keys}): signed by \
         another key, or the module changed after signing",
        path.display()
    )]
    Invalid {
        /// The signature file.
        path: PathBuf,
        /// The keys tried, as [`VerifyingKey`]s describe themselves.
        keys: String,
    },
}

impl SignatureError {
    /// The `reason` of the refusal in logs and the `result` of `cubepod_policy_swaps_total`.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            SignatureError::Missing { .. } => "signature_missing",
            SignatureError::Malformed { .. } => "signature_malformed",
            SignatureError::Invalid { .. } => "signature_invalid",
        }
    }
}

#[derive(Clone)]
enum PublicKey {
    EcdsaP256(p256::ecdsa::VerifyingKey),
    Ed25519(ed25519_dalek::VerifyingKey),
}

/// One configured public key.
#[derive(Clone)]
pub struct VerifyingKey {
    key: PublicKey,
    path: PathBuf,
    fingerprint: String,
}

impl VerifyingKey {
    /// Reads a PEM "PUBLIC KEY" (SPKI) file of an ECDSA P-256 or Ed25519 key.
    pub(crate) fn load(path: &Path) -> Result<Self, KeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_pem(&text, path)
    }

    fn from_pem(text: &str, path: &Path) -> Result<Self, KeyError> {
        let parse = |why: String| KeyError::Parse {
            path: path.to_path_buf(),
            why,
        };
        let (label, document) = p256::pkcs8::Document::from_pem(text)
            .map_err(|e| parse(format!("not a PEM public key: {e}")))?;
        if label != "PUBLIC KEY" {
            return Err(parse(format!(
                "a PEM {label:?}, not a \"PUBLIC KEY\" (SPKI): give the public key, as \
                 `cosign generate-key-pair` writes cosign.pub or `openssl pkey -pubout` prints it"
            )));
        }
        let der = document.as_bytes();
        let key = if let Ok(key) = p256::ecdsa::VerifyingKey::from_public_key_der(der) {
            PublicKey::EcdsaP256(key)
        } else if let Ok(key) = ed25519_dalek::VerifyingKey::from_public_key_der(der) {
            PublicKey::Ed25519(key)
        } else {
            return Err(parse(
                "neither an ECDSA P-256 nor an Ed25519 public key (the only kinds supported)"
                    .to_string(),
            ));
        };
        Ok(Self {
            key,
            path: path.to_path_buf(),
            // Enough of the SPKI's sha256 to tell keys apart in a log line.
            fingerprint: hex::encode(&Sha256::digest(der)[..8]),
        })
    }

    /// `ecdsa-p256` or `ed25519`.
    pub fn algorithm(&self) -> &'static str {
        match self.key {
            PublicKey::EcdsaP256(_) => "ecdsa-p256",
            PublicKey::Ed25519(_) => "ed25519",
        }
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `<path> (<algorithm>, <fingerprint>)`, for messages.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} ({}, {})",
            self.path.display(),
            self.algorithm(),
            self.fingerprint
        )
    }
}

impl std::fmt::Debug for VerifyingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// A signature, decoded for each kind of key it could be for.
struct Decoded {
    ecdsa: Option<p256::ecdsa::Signature>,
    ed25519: Option<ed25519_dalek::Signature>,
}

/// The configured verification keys; empty means modules are not verified.
#[derive(Clone, Debug, Default)]
pub struct KeyRing {
    keys: Vec<VerifyingKey>,
}

impl KeyRing {
    /// Reads every key file; any that cannot be used fails the whole (a key silently left out
    /// would refuse every module it signed).
    pub fn load(paths: &[PathBuf]) -> Result<Self, KeyError> {
        let keys = paths
            .iter()
            .map(|p| VerifyingKey::load(p))
            .collect::<Result<_, _>>()?;
        Ok(Self { keys })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub(crate) fn keys(&self) -> &[VerifyingKey] {
        &self.keys
    }

    /// Checks `signature` (the content of the file at `path`) over `module`; returns the first
    /// key that verifies it.
    pub fn verify(
        &self,
        module: &[u8],
        signature: &[u8],
        path: &Path,
    ) -> Result<&VerifyingKey, SignatureError> {
        let decoded = self
            .decode(signature)
            .map_err(|why| SignatureError::Malformed {
                path: path.to_path_buf(),
                why,
            })?;
        self.keys
            .iter()
            .find(|key| match (&key.key, &decoded) {
                (PublicKey::EcdsaP256(key), Decoded { ecdsa: Some(s), .. }) => {
                    key.verify(module, s).is_ok()
                }
                (
                    PublicKey::Ed25519(key),
                    Decoded {
                        ed25519: Some(s), ..
                    },
                ) => key.verify_strict(module, s).is_ok(),
                _ => false,
            })
            .ok_or_else(|| SignatureError::Invalid {
                path: path.to_path_buf(),
                keys: self
                    .keys
                    .iter()
                    .map(VerifyingKey::describe)
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Base64 (line breaks and surrounding blanks allowed, as `base64` wraps its output), then
    /// a signature of a kind some configured key checks.
    fn decode(&self, text: &[u8]) -> Result<Decoded, String> {
        let compact: Vec<u8> = text
            .iter()
            .copied()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        if compact.is_empty() {
            return Err("the file is empty".to_string());
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&compact)
            .map_err(|e| format!("not base64: {e}"))?;
        let wants = |algorithm: &str| self.keys.iter().any(|k| k.algorithm() == algorithm);
        let decoded = Decoded {
            ecdsa: wants("ecdsa-p256")
                .then(|| p256::ecdsa::Signature::from_der(&bytes).ok())
                .flatten(),
            ed25519: wants("ed25519")
                .then(|| ed25519_dalek::Signature::from_slice(&bytes).ok())
                .flatten(),
        };
        if decoded.ecdsa.is_none() && decoded.ed25519.is_none() {
            let mut expected = Vec::new();
            if wants("ecdsa-p256") {
                expected.push("an ECDSA P-256 signature (DER)");
            }
            if wants("ed25519") {
                expected.push("an Ed25519 signature (64 bytes)");
            }
            return Err(format!(
                "{} bytes that are not {} (truncated, or not a signature)",
                bytes.len(),
                expected.join(" or ")
            ));
        }
        Ok(decoded)
    }
}

enum PrivateKey {
    EcdsaP256(p256::ecdsa::SigningKey),
    Ed25519(Box<ed25519_dalek::SigningKey>),
}

/// A private key of `policy sign`. Its Debug shows the algorithm only.
pub struct SigningKey {
    key: PrivateKey,
}

impl SigningKey {
    /// Reads an unencrypted PEM PKCS#8 ("PRIVATE KEY") file of a P-256 or Ed25519 key.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let parse = |why: String| KeyError::Parse {
            path: path.to_path_buf(),
            why,
        };
        let label = pem::decode_label(text.as_bytes())
            .map_err(|e| parse(format!("not a PEM private key: {e}")))?;
        match label {
            "PRIVATE KEY" => {}
            "ENCRYPTED SIGSTORE PRIVATE KEY" | "ENCRYPTED COSIGN PRIVATE KEY" => {
                return Err(parse(
                    "a cosign key (encrypted): sign with `cosign sign-blob --key` instead"
                        .to_string(),
                ));
            }
            "ENCRYPTED PRIVATE KEY" => {
                return Err(parse(
                    "an encrypted PKCS#8 key: decrypt it first (`openssl pkcs8 -in KEY -out \
                     PLAIN`), or sign with cosign"
                        .to_string(),
                ));
            }
            "EC PRIVATE KEY" => {
                return Err(parse(
                    "a SEC1 key: convert it to PKCS#8 with `openssl pkcs8 -topk8 -nocrypt -in \
                     KEY -out PLAIN`"
                        .to_string(),
                ));
            }
            other => {
                return Err(parse(format!(
                    "a PEM {other:?}, not a \"PRIVATE KEY\" (PKCS#8)"
                )));
            }
        }
        let key = if let Ok(key) = p256::ecdsa::SigningKey::from_pkcs8_pem(&text) {
            PrivateKey::EcdsaP256(key)
        } else if let Ok(key) = ed25519_dalek::SigningKey::from_pkcs8_pem(&text) {
            PrivateKey::Ed25519(Box::new(key))
        } else {
            return Err(parse(
                "neither an ECDSA P-256 nor an Ed25519 private key (the only kinds supported)"
                    .to_string(),
            ));
        };
        Ok(Self { key })
    }

    pub(crate) fn algorithm(&self) -> &'static str {
        match self.key {
            PrivateKey::EcdsaP256(_) => "ecdsa-p256",
            PrivateKey::Ed25519(_) => "ed25519",
        }
    }

    /// The signature of `module`, base64 without a line break, as `cosign sign-blob` writes it.
    pub fn sign(&self, module: &[u8]) -> String {
        let bytes = match &self.key {
            PrivateKey::EcdsaP256(key) => {
                let signature: p256::ecdsa::Signature = key.sign(module);
                signature.to_der().as_bytes().to_vec()
            }
            PrivateKey::Ed25519(key) => key.sign(module).to_bytes().to_vec(),
        };
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("algorithm", &self.algorithm())
            .finish_non_exhaustive()
    }
}

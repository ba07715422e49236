//! `cubepod-controller policy sign --key KEY MODULE`: the module's detached signature, in the
//! format `cosign sign-blob --key` writes and `run --policy-verify-key` reads.

use sha2::{Digest, Sha256};

use super::CliError;
use crate::config::PolicySignArgs;
use crate::signing::{SigningKey, signature_path};

/// Runs `policy sign`: writes the module's signature to `<module>.sig` (or `--output`).
pub(crate) fn run(args: &PolicySignArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let key = SigningKey::load(&args.key)?;
    // A file, not `builtin:default`: the built-in policy is verified with the binary. The
    // signature is over the component as built, so that the same signature verifies it
    // compressed or not; `read_module` decompresses as the controller does.
    let module = super::read_module(&args.module)?;
    let path = args
        .output
        .clone()
        .unwrap_or_else(|| signature_path(&args.module));
    std::fs::write(&path, key.sign(&module)).map_err(|source| CliError::Write {
        path: path.clone(),
        source,
    })?;
    writeln!(
        out,
        "signed {} ({} bytes, sha256 {}) with the {} key {}: {}",
        args.module.display(),
        module.len(),
        hex::encode(Sha256::digest(&module)),
        key.algorithm(),
        args.key.display(),
        path.display()
    )?;
    Ok(())
}

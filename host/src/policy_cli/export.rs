//! `cubepod-controller policy export builtin:default -o FILE`: the module built into the binary
//! as a file, to inspect, sign, ship in a ConfigMap, or compare with a policy's own build.

use sha2::{Digest, Sha256};

use super::{CliError, read_module};
use crate::config::PolicyExportArgs;

/// Runs `policy export`: writes the module's bytes, unchanged, to `--output`.
pub(crate) fn run(args: &PolicyExportArgs, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let bytes = read_module(&args.module)?;
    std::fs::write(&args.output, &bytes).map_err(|source| CliError::Write {
        path: args.output.clone(),
        source,
    })?;
    writeln!(
        out,
        "wrote {} to {} ({} bytes, sha256 {})",
        args.module.display(),
        args.output.display(),
        bytes.len(),
        hex::encode(Sha256::digest(&bytes))
    )?;
    Ok(())
}

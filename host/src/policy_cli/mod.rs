//! The `policy` subcommands, side by side: `policy test` (scenario files and the conformance
//! self-test, on a scratch cluster through the controller's own reconcile core), `policy diff`
//! (what a candidate module would do differently from the stable one, on a scenario's objects
//! or a live cluster's), `policy inspect` (what a module is, whether the controller would admit
//! it) and `policy sign` (a
//! detached signature, as `cosign sign-blob --key` writes it), `policy export` (the built-in
//! module as a file) and `policy new` (a policy crate on the SDK, from templates). Each loads
//! modules as `run` does.

pub(crate) mod diff;
pub(crate) mod export;
pub(crate) mod inspect;
pub(crate) mod new;
pub(crate) mod sign;
pub(crate) mod test;

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use tokio::runtime::Handle;

use crate::config::{ContainmentArgs, EngineFlags, GuestArgs, PolicyCommand};
use crate::scenario::junit;
use crate::scenario::runner::Report;
use cubepod_policy_host::runtime::{DEFAULT_POLICY, PolicyEngine, RuntimeError};

/// The MODULE argument that names the policy embedded in the binary.
pub(crate) const BUILTIN_DEFAULT: &str = "builtin:default";

/// Why `policy test` or `policy inspect` could not run at all (as opposed to a scenario that
/// failed).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A module or scenario file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The read's error.
        #[source]
        source: std::io::Error,
    },
    /// A module file that does not decompress, or decompresses past its bound.
    #[error("{0}")]
    Module(#[from] crate::admission::FileError),
    /// A directory given as SCENARIO holds no scenario file.
    #[error("{}: no scenario file (*.yaml, *.yml) there", path.display())]
    NoScenarios {
        /// The directory.
        path: PathBuf,
    },
    /// The wasm engine could not be made.
    #[error("{0}")]
    Engine(RuntimeError),
    /// Neither conformance cases nor scenarios to run.
    #[error(
        "nothing to run: --no-conformance leaves out the conformance cases, and no SCENARIO was given"
    )]
    NothingToRun,
    /// The JUnit report could not be written.
    #[error("writing the JUnit report {}: {source}", path.display())]
    Junit {
        /// The report's file.
        path: PathBuf,
        /// The write's error.
        #[source]
        source: std::io::Error,
    },
    /// The signing key could not be used.
    #[error("{0}")]
    Key(#[from] crate::signing::KeyError),
    /// A file (the exported module, the signature) could not be written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The write's error.
        #[source]
        source: std::io::Error,
    },
    /// Standard output could not be written.
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
    /// A module was refused by the controller's admission: `policy diff` has nothing to
    /// compare.
    #[error("{module}: refused ({reason}): {why}")]
    Refused {
        /// The module, as given.
        module: String,
        /// The refusal's reason, as `cubepod_policy_swaps_total` names it.
        reason: &'static str,
        /// Why.
        why: String,
    },
    /// A scenario file could not be read.
    #[error("{0}")]
    Scenario(crate::scenario::format::FormatError),
    /// No SCENARIO was given and no cluster was found.
    #[error(
        "no SCENARIO given and no cluster found: no kubeconfig (KUBECONFIG, ~/.kube/config) and \
         no in-cluster environment"
    )]
    NoCluster,
    /// The cluster's connection settings are unusable.
    #[error("Kubernetes connection: {0}")]
    Connection(#[from] cubepod_kube::rest::RestError),
    /// The cluster could not be read.
    #[error("{what}: {source}")]
    ClusterRead {
        /// The read, in words.
        what: String,
        /// The API's error.
        #[source]
        source: cubepod_kube::ApiError,
    },
    /// The objects could not be put in a scratch cluster.
    #[error("{world}: the objects could not be put in a scratch cluster: {why}")]
    Seed {
        /// Where the objects came from.
        world: String,
        /// Why.
        why: String,
    },
    /// `policy new` could not make the crate.
    #[error("{0}")]
    New(#[from] new::NewError),
}

/// The bytes of MODULE: the embedded default policy for [`BUILTIN_DEFAULT`], else the file,
/// decompressed when gzip (within the controller's default `--max-policy-bytes`), as the
/// controller reads it.
pub(crate) fn read_module(module: &Path) -> Result<Cow<'static, [u8]>, CliError> {
    if module.as_os_str() == BUILTIN_DEFAULT {
        return Ok(Cow::Borrowed(DEFAULT_POLICY));
    }
    let bytes = std::fs::read(module).map_err(|source| CliError::Read {
        path: module.to_path_buf(),
        source,
    })?;
    let bytes = crate::admission::decompressed(
        bytes,
        module,
        crate::admission::DEFAULT_MAX_MODULE_BYTES,
        "the controller's default --max-policy-bytes",
    )?;
    Ok(Cow::Owned(bytes))
}

/// The JUnit report of `reports` into `path` (`--junit`), when one is asked for.
pub(crate) fn write_junit(path: Option<&Path>, reports: &[Report]) -> Result<(), CliError> {
    let Some(path) = path else {
        return Ok(());
    };
    std::fs::write(path, junit::render(reports)).map_err(|source| CliError::Junit {
        path: path.to_path_buf(),
        source,
    })
}

/// An engine with the given bounds and containment rules, as a `policy` subcommand runs it
/// ([`EngineFlags::runtime_config`]).
pub(crate) fn engine(
    guest: &GuestArgs,
    containment: &ContainmentArgs,
) -> Result<PolicyEngine, CliError> {
    let config = EngineFlags::Policy { guest, containment }.runtime_config();
    PolicyEngine::new(config).map_err(CliError::Engine)
}

/// Runs one `policy` subcommand; `Ok(true)` on success, `Ok(false)` when a scenario failed or
/// the module does not fit (or its signature does not verify). Call from a blocking thread:
/// policy calls block on the scratch cluster's runtime.
pub fn run(
    command: &PolicyCommand,
    handle: &Handle,
    out: &mut dyn std::io::Write,
) -> Result<bool, CliError> {
    match command {
        PolicyCommand::Test(args) => test::run(args, handle, out),
        PolicyCommand::Inspect(args) => inspect::run(args, handle, out),
        PolicyCommand::Diff(args) => diff::run(args, handle, out),
        PolicyCommand::Sign(args) => sign::run(args, out).map(|()| true),
        PolicyCommand::Export(args) => export::run(args, out).map(|()| true),
        PolicyCommand::New(args) => new::run(args, out).map(|()| true),
    }
}

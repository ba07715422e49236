//! `cubepod-controller policy inspect MODULE`: what a policy module is (name, version, the
//! contract it targets and those the host supports, digest, size, imports, exports) and whether
//! it fits its contract, with why not. It loads the module exactly as the controller would, then runs the conformance
//! self-test that the controller requires; a module that fails either step does not fit. With
//! `--verify-key`, it also gives the signature's verdict, as `run --policy-verify-key` would.

use serde::Serialize;
use tokio::runtime::Handle;
use wasmtime::component::Component;

use super::{self as cli, CliError};
use crate::admission::{Admission, Candidate, Extent, FileError, Refused};
use crate::config::PolicyInspectArgs;
use crate::scenario::conformance;
use crate::signing::KeyRing;
use cubepod_policy_host::runtime::{CONTRACT_PACKAGE, Contract, RuntimeError, targeted_version};

/// What inspection found.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Inspection {
    pub(crate) module: String,
    /// sha256 of the bytes, lower-case hex.
    pub(crate) digest: String,
    pub(crate) size: usize,
    pub(crate) name: Option<String>,
    pub(crate) version: Option<String>,
    /// What `describe` said of the contract.
    pub(crate) contract_version: Option<String>,
    /// The contract the component targets, from its import and export names
    /// (`cubepod:controller@0.1.0`), supported or not; `None` when they name none.
    pub(crate) contract: Option<String>,
    /// Every contract the host runs modules of, oldest first.
    pub(crate) host_contracts: Vec<String>,
    /// `None` when the bytes are not a component at all.
    pub(crate) imports: Option<Vec<String>>,
    pub(crate) exports: Option<Vec<String>>,
    /// How many conformance cases passed, when it got that far.
    pub(crate) conformance: Option<usize>,
    pub(crate) fits: bool,
    /// Why the module does not fit the contract.
    pub(crate) why: Option<String>,
    /// The signature's verdict, when verification keys were given.
    pub(crate) signature: Option<SignatureVerdict>,
}

/// What `--verify-key` found of the module's signature.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SignatureVerdict {
    /// A controller with these keys would admit the module (as far as its signature goes).
    pub(crate) valid: bool,
    /// `valid`, `not_checked` (the built-in policy), or the refusal's reason
    /// (`signature_missing`, `signature_malformed`, `signature_invalid`).
    pub(crate) result: String,
    pub(crate) detail: String,
}

impl SignatureVerdict {
    fn of(admission: &Admission, candidate: &Candidate) -> Option<Self> {
        if admission.keys().is_empty() {
            return None;
        }
        Some(match admission.verify(candidate) {
            Ok(Some(key)) => Self {
                valid: true,
                result: "valid".to_string(),
                detail: format!("verified by {}", key.describe()),
            },
            Ok(None) => Self {
                valid: true,
                result: "not_checked".to_string(),
                detail: "the built-in policy is part of the binary".to_string(),
            },
            Err(error) => Self {
                valid: false,
                result: error.reason().to_string(),
                detail: error.to_string(),
            },
        })
    }
}

/// Inspects a module as read (its signature too, when `admission` has keys). Call from a
/// blocking thread: the self-test's scratch clusters run on `handle`.
pub(crate) fn inspect(admission: &Admission, candidate: &Candidate, handle: &Handle) -> Inspection {
    let engine = admission.engine();
    let bytes: &[u8] = &candidate.bytes;
    let mut found = Inspection {
        module: candidate.what.clone(),
        digest: candidate.digest(),
        size: bytes.len(),
        name: None,
        version: None,
        contract_version: None,
        contract: None,
        host_contracts: Contract::SUPPORTED.iter().map(|c| c.to_string()).collect(),
        imports: None,
        exports: None,
        conformance: None,
        fits: false,
        why: None,
        signature: SignatureVerdict::of(admission, candidate),
    };
    // The controller's own checks, as far as it would take them (to the first failure).
    let extent = Extent::Conformance(conformance::Extent::UntilFirstFailure);
    let examination = match admission.examine(bytes, handle, extent) {
        Ok(examination) => examination,
        Err(refused) => {
            // A component that breaks the contract still has imports and exports worth
            // showing: they are usually why.
            if let Ok(component) = Component::new(engine.engine(), bytes) {
                let ty = component.component_type();
                let e = engine.engine();
                let imports: Vec<String> = ty.imports(e).map(|(n, _)| n.to_string()).collect();
                let exports: Vec<String> = ty.exports(e).map(|(n, _)| n.to_string()).collect();
                found.contract = targeted_version(&imports, &exports)
                    .map(|version| format!("{CONTRACT_PACKAGE}@{version}"));
                found.imports = Some(imports);
                found.exports = Some(exports);
            }
            found.why = Some(match &refused {
                Refused::Load(error) => why(bytes, error),
                other => one_line(&other.to_string()),
            });
            return found;
        }
    };
    let loaded = &examination.module;
    let info = loaded.info();
    found.name = Some(info.name.clone());
    found.version = Some(info.version.clone());
    found.contract_version = Some(info.contract_version.clone());
    found.contract = Some(loaded.contract().to_string());
    found.imports = Some(loaded.imports().to_vec());
    found.exports = Some(loaded.exports().to_vec());
    match examination.verdict() {
        Ok((_, passed)) => {
            found.conformance = Some(passed);
            found.fits = true;
        }
        Err(Refused::SelfTest(error)) => {
            found.why = Some(format!("it fails the conformance self-test: {error}"));
        }
        Err(other) => found.why = Some(one_line(&other.to_string())),
    }
    found
}

/// The reason, in words that say what kind of problem it is.
fn why(bytes: &[u8], error: &RuntimeError) -> String {
    // The preambles of the binary format: `\0asm`, then the version and layer.
    const MAGIC: &[u8] = b"\0asm";
    const CORE_MODULE: &[u8] = &[0x01, 0x00, 0x00, 0x00];
    match error {
        RuntimeError::Compile { .. } if !bytes.starts_with(MAGIC) => {
            "it is not WebAssembly at all (no \\0asm header)".to_string()
        }
        RuntimeError::Compile { .. } if bytes.get(4..8) == Some(CORE_MODULE) => {
            "it is a core WebAssembly module, not a component: build the policy for \
             wasm32-wasip2, or make a component of it with `wasm-tools component new`"
                .to_string()
        }
        RuntimeError::Compile { why } => format!(
            "it is not a WebAssembly component wasmtime can compile: {}",
            one_line(why)
        ),
        RuntimeError::Contract { why, .. } => why.clone(),
        other => one_line(&other.to_string()),
    }
}

/// Multi-line error text (wasmparser prints byte arrays over lines) on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The text report.
pub(crate) fn render_text(found: &Inspection) -> String {
    let or_unknown = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".to_string());
    // The version the component targets: what describe said is the same once it loaded.
    let targeted = found
        .contract
        .as_deref()
        .and_then(|c| c.strip_prefix(CONTRACT_PACKAGE)?.strip_prefix('@'));
    let mut out = format!(
        "module:    {}\nname:      {}\nversion:   {}\ncontract:  {} (the host supports {})\n\
         digest:    sha256:{}\nsize:      {} bytes\n",
        found.module,
        or_unknown(&found.name),
        or_unknown(&found.version),
        targeted.unwrap_or("unknown"),
        Contract::supported_versions(),
        found.digest,
        found.size,
    );
    for (title, items) in [("imports", &found.imports), ("exports", &found.exports)] {
        match items {
            None => out.push_str(&format!("{title}:   unknown (not a component)\n")),
            Some(items) if items.is_empty() => out.push_str(&format!("{title}:   none\n")),
            Some(items) => {
                out.push_str(&format!("{title}:\n"));
                for item in items {
                    out.push_str(&format!("  {item}\n"));
                }
            }
        }
    }
    // Judged against the contract it targets, when the host runs that one.
    let contract = targeted
        .and_then(Contract::of_version)
        .map(|c| format!("the contract {c}"))
        .unwrap_or_else(|| {
            format!(
                "a contract the host supports ({})",
                Contract::supported_versions()
            )
        });
    match (&found.why, found.conformance) {
        (None, Some(cases)) => out.push_str(&format!(
            "fits {contract}: yes (conformance: {cases} cases passed)\n"
        )),
        (why, _) => out.push_str(&format!(
            "does not fit {contract}: {}\n",
            why.as_deref().unwrap_or("unknown reason")
        )),
    }
    if let Some(signature) = &found.signature {
        out.push_str(&format!(
            "signature: {}: {}\n",
            signature.result, signature.detail
        ));
    }
    out
}

/// Runs `policy inspect`; `Ok(true)` when the module fits (and, with `--verify-key`, its
/// signature verifies). Call from a blocking thread.
pub(crate) fn run(
    args: &PolicyInspectArgs,
    handle: &Handle,
    out: &mut dyn std::io::Write,
) -> Result<bool, CliError> {
    let engine = cli::engine(&args.guest, &args.containment)?;
    let admission = Admission::new(engine, KeyRing::load(&args.verify_keys)?);
    let candidate = if args.module.as_os_str() == cli::BUILTIN_DEFAULT {
        Candidate {
            what: cli::BUILTIN_DEFAULT.to_string(),
            ..Candidate::builtin()
        }
    } else {
        // The controller's own reading of a module and its signature; this thread is a
        // blocking one, outside the runtime.
        handle
            .block_on(admission.read(&args.module))
            .map_err(|error| CliError::Read {
                path: args.module.clone(),
                source: match error {
                    FileError::Io { source, .. } => source,
                    refused => std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("refused (file): {refused}"),
                    ),
                },
            })?
    };
    let found = inspect(&admission, &candidate, handle);
    if args.json {
        let text = serde_json::to_string_pretty(&found)
            .map_err(|e| CliError::Output(std::io::Error::other(e)))?;
        writeln!(out, "{text}")?;
    } else {
        write!(out, "{}", render_text(&found))?;
    }
    Ok(found.fits && found.signature.as_ref().is_none_or(|s| s.valid))
}

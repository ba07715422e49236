//! `cubepod-controller policy inspect MODULE`: what a policy module is (name, version,
//! contract version, digest, size, imports, exports) and whether it fits the contract, with
//! why not. It loads the module exactly as the controller would, then runs the conformance
//! self-test that hot swap requires; a module that fails either step does not fit.

use std::path::Path;

use serde::Serialize;
use tokio::runtime::Handle;
use wasmtime::component::Component;

use crate::config::PolicyInspectArgs;
use crate::runtime::{CONTRACT_PACKAGE, CONTRACT_VERSION, PolicyEngine, RuntimeError};
use crate::scenario::cli::{self, CliError};
use crate::scenario::conformance;

/// What inspection found.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Inspection {
    pub module: String,
    /// sha256 of the bytes, lower-case hex.
    pub digest: String,
    pub size: usize,
    pub name: Option<String>,
    pub version: Option<String>,
    pub contract_version: Option<String>,
    /// The contract the host speaks: `cubepod:controller@0.1.0`.
    pub host_contract: String,
    /// `None` when the bytes are not a component at all.
    pub imports: Option<Vec<String>>,
    pub exports: Option<Vec<String>>,
    /// How many conformance cases passed, when it got that far.
    pub conformance: Option<usize>,
    pub fits: bool,
    /// Why the module does not fit the contract.
    pub why: Option<String>,
}

/// Inspects `bytes` (named `module` in the output). Call from a blocking thread: the
/// self-test's scratch clusters run on `handle`.
pub fn inspect(engine: &PolicyEngine, module: &str, bytes: &[u8], handle: &Handle) -> Inspection {
    let mut found = Inspection {
        module: module.to_string(),
        digest: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes)),
        size: bytes.len(),
        name: None,
        version: None,
        contract_version: None,
        host_contract: format!("{CONTRACT_PACKAGE}@{CONTRACT_VERSION}"),
        imports: None,
        exports: None,
        conformance: None,
        fits: false,
        why: None,
    };
    let loaded = match engine.load(bytes) {
        Ok(loaded) => loaded,
        Err(error) => {
            // A component that breaks the contract still has imports and exports worth
            // showing: they are usually why.
            if let Ok(component) = Component::new(engine.engine(), bytes) {
                let ty = component.component_type();
                let e = engine.engine();
                found.imports = Some(ty.imports(e).map(|(n, _)| n.to_string()).collect());
                found.exports = Some(ty.exports(e).map(|(n, _)| n.to_string()).collect());
            }
            found.why = Some(why(bytes, &error));
            return found;
        }
    };
    let info = loaded.info();
    found.name = Some(info.name.clone());
    found.version = Some(info.version.clone());
    found.contract_version = Some(info.contract_version.clone());
    found.imports = Some(loaded.imports().to_vec());
    found.exports = Some(loaded.exports().to_vec());
    match conformance::self_test(&loaded, handle) {
        Ok(passed) => {
            found.conformance = Some(passed);
            found.fits = true;
        }
        Err(error) => found.why = Some(format!("it fails the conformance self-test: {error}")),
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
        RuntimeError::Contract { why } => why.clone(),
        other => one_line(&other.to_string()),
    }
}

/// Multi-line error text (wasmparser prints byte arrays over lines) on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The text report.
pub fn render_text(found: &Inspection) -> String {
    let or_unknown = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".to_string());
    let mut out = format!(
        "module:    {}\nname:      {}\nversion:   {}\ncontract:  {} (the host speaks {})\n\
         digest:    sha256:{}\nsize:      {} bytes\n",
        found.module,
        or_unknown(&found.name),
        or_unknown(&found.version),
        or_unknown(&found.contract_version),
        CONTRACT_VERSION,
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
    match (&found.why, found.conformance) {
        (None, Some(cases)) => out.push_str(&format!(
            "fits the contract {}: yes (conformance: {cases} cases passed)\n",
            found.host_contract
        )),
        (why, _) => out.push_str(&format!(
            "does not fit the contract {}: {}\n",
            found.host_contract,
            why.as_deref().unwrap_or("unknown reason")
        )),
    }
    out
}

/// Runs `policy inspect`; `Ok(true)` when the module fits. Call from a blocking thread.
pub fn run(
    args: &PolicyInspectArgs,
    handle: &Handle,
    out: &mut dyn std::io::Write,
) -> Result<bool, CliError> {
    let bytes = cli::read_module(&args.module)?;
    let engine = cli::engine(
        args.guest_deadline,
        args.guest_memory_mib,
        &args.containment,
    )?;
    let found = inspect(&engine, &display(&args.module), &bytes, handle);
    if args.json {
        let text = serde_json::to_string_pretty(&found)
            .map_err(|e| CliError::Output(std::io::Error::other(e)))?;
        writeln!(out, "{text}")?;
    } else {
        write!(out, "{}", render_text(&found))?;
    }
    Ok(found.fits)
}

fn display(module: &Path) -> String {
    module.display().to_string()
}

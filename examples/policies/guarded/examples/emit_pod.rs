//! Writes the Pods this policy emits to a folder, for the strict schema check that CI runs on
//! the default policy's manifests:
//! `cargo run -p cubepod-policy-guarded --example emit_pod -- out/guarded`
//! then `.ci/validate-k8s out/guarded`.

use std::path::PathBuf;

// The policy's own source: the crate is only a component (no library to link against).
// Its other items (the exported type, the tests' helpers) are not used here.
#[allow(dead_code)]
#[path = "../src/lib.rs"]
mod guarded;

use cubepod_policy_sdk::fixtures::sandbox;
use cubepod_policy_sdk::recording::RecordingClient;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: emit_pod DIR")?);
    std::fs::create_dir_all(&dir)?;
    // Defaulted resources, and resources of its own.
    let sandboxes = [
        sandbox("dev-alice").input(),
        sandbox("dev-bob")
            .with_spec(|s| {
                s.cpu = Some("500m".into());
                s.memory = Some("8Gi".into());
            })
            .input(),
    ];
    for input in sandboxes {
        let mut client = RecordingClient::default();
        guarded::reconcile(&mut client, input)?;
        for call in &client.calls {
            if let Some(manifest) = call.manifest() {
                let path = dir.join(format!("{}.json", call.summary().replace(' ', "-")));
                std::fs::write(&path, serde_json::to_vec_pretty(manifest)?)?;
                println!("{}", path.display());
            }
        }
    }
    Ok(())
}

//! Writes every kind of manifest the default policy emits to a folder, for the strict schema
//! check in CI: `cargo run -p cubepod-policy-sdk --example emit_manifests -- out/manifests`
//! then `.ci/validate-k8s out/manifests`.

use std::path::PathBuf;

use cubepod_policy_sdk::fixtures::{observe, pool, pool_input, sandbox};
use cubepod_policy_sdk::pool::reconcile_pool;
use cubepod_policy_sdk::reconcile;
use cubepod_policy_sdk::recording::RecordingClient;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: emit_manifests DIR")?);
    std::fs::create_dir_all(&dir)?;
    let mut written = Vec::new();
    let mut write = |file: String, manifest: &serde_json::Value| -> std::io::Result<()> {
        let path = dir.join(file);
        std::fs::write(&path, serde_json::to_vec_pretty(manifest)?)?;
        written.push(path);
        Ok(())
    };

    // A plain sandbox with resources and a storage class: Pod, both PVCs, Secret.
    let mut client = RecordingClient::default();
    let plain = sandbox("dev-alice").with_spec(|s| {
        s.cpu = Some("2".into());
        s.memory = Some("4Gi".into());
        s.storage_class = Some("csi-rbd".into());
    });
    reconcile::reconcile(&mut client, &plain.input())?;
    for call in &client.calls {
        if let Some(manifest) = call.manifest() {
            write(
                format!("{}.json", call.summary().replace(' ', "-")),
                manifest,
            )?;
        }
    }

    // A fork: both PVCs with dataSource.
    let mut fork_client = RecordingClient::default();
    let mut input = sandbox("dev-alice-fork").forked_from("dev-alice").input();
    input.fork_source = Some(
        sandbox("dev-alice")
            .with_status(|s| {
                s.rootfs_pvc = Some("dev-alice-rootfs-g1".into());
                s.workspace_pvc = Some("dev-alice-workspace".into());
            })
            .build(),
    );
    input.observed = observe(&fork_client, "dev-alice-fork", false);
    reconcile::reconcile(&mut fork_client, &input)?;
    for call in fork_client
        .calls
        .iter()
        .filter(|c| c.summary().starts_with("ensure-pvc"))
    {
        if let Some(manifest) = call.manifest() {
            write(
                format!("fork-{}.json", call.summary().replace(' ', "-")),
                manifest,
            )?;
        }
    }

    // A warm pool member Sandbox.
    let out = reconcile_pool(&pool_input(pool("python-pool", 1), vec![]));
    for member in &out.create {
        let manifest: serde_json::Value = serde_json::from_str(&member.manifest)?;
        write(format!("member-{}.json", member.name), &manifest)?;
    }

    for path in written {
        println!("{}", path.display());
    }
    Ok(())
}

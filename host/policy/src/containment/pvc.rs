//! Rule `pvc`: a sandbox's volume is a block PVC of bounded size in the Sandbox's storage
//! class, and a fork's clones only a PVC of the same role that its source owns.

use std::fmt;

use super::json::Json;
use super::scope::pvc_role;
use super::{
    ChildRole, Containment, Fields, Refusal, Rule, SandboxScope, clip, quantity, quantity_value,
    short, sub,
};

impl Containment {
    pub(super) fn check_pvc(
        &self,
        scope: &SandboxScope,
        role: ChildRole,
        what: &dyn fmt::Display,
        object: &Json<'_>,
    ) -> Result<(), Refusal> {
        let fields = Fields::new(Rule::Pvc, what);
        fields.object(object, "", &["apiVersion", "kind", "metadata", "spec"])?;
        let spec = fields.required(object, "", "spec")?;
        let spec_map = fields.object(
            spec,
            "spec",
            &[
                "accessModes",
                "volumeMode",
                "resources",
                "storageClassName",
                "dataSource",
            ],
        )?;
        if spec.get("volumeMode").and_then(Json::as_str) != Some("Block") {
            return Err(fields.refuse(
                "spec.volumeMode",
                "a sandbox's volume must be volumeMode: Block",
            ));
        }
        const ACCESS_MODES: [&str; 2] = ["ReadWriteOnce", "ReadWriteOncePod"];
        let modes = fields.array(
            fields.required(spec, "spec", "accessModes")?,
            "spec.accessModes",
        )?;
        if modes.is_empty() {
            return Err(fields.refuse("spec.accessModes", "no access mode"));
        }
        for (i, mode) in modes.iter().enumerate() {
            if !mode.as_str().is_some_and(|m| ACCESS_MODES.contains(&m)) {
                return Err(fields.refuse(
                    format!("spec.accessModes[{i}]"),
                    format!("{} is not one of {ACCESS_MODES:?}", short(mode)),
                ));
            }
        }
        let resources = fields.required(spec, "spec", "resources")?;
        fields.object(resources, "spec.resources", &["requests", "limits"])?;
        let requests = fields.required(resources, "spec.resources", "requests")?;
        fields.object(requests, "spec.resources.requests", &["storage"])?;
        fields.required(requests, "spec.resources.requests", "storage")?;
        for part in ["requests", "limits"] {
            let Some(amounts) = resources.get(part) else {
                continue;
            };
            let at = sub(&"spec.resources", part);
            fields.object(amounts, at, &["storage"])?;
            if let Some(size) = amounts.get("storage") {
                self.check_size(&fields, &sub(&at, "storage"), size)?;
            }
        }
        if let Some(class) = spec_map.get("storageClassName")
            && (class.as_str() != scope.storage_class.as_deref() || class.is_null())
        {
            return Err(fields.refuse(
                "spec.storageClassName",
                format!(
                    "{} is not the storage class the Sandbox's spec names ({})",
                    short(class),
                    scope
                        .storage_class
                        .as_deref()
                        .map_or("none".to_string(), |c| format!("{c:?}"))
                ),
            ));
        }
        if let Some(source) = spec_map.get("dataSource") {
            check_clone(scope, role, &fields, source)?;
        }
        Ok(())
    }

    fn check_size(
        &self,
        fields: &Fields<'_>,
        field: &dyn fmt::Display,
        size: &Json<'_>,
    ) -> Result<(), Refusal> {
        let text = size
            .as_str()
            .ok_or_else(|| fields.refuse(field, "a quantity must be a string"))?;
        let bytes = quantity_value(text)
            .map_err(|e| fields.refuse(field, format!("{:?} {e}", clip(text, 64))))?;
        if bytes > self.max_volume_bytes {
            return Err(fields.refuse(
                field,
                format!(
                    "{:?} is more than the largest volume allowed, {} (--max-volume-size)",
                    clip(text, 64),
                    quantity::format_bytes(self.max_volume_bytes)
                ),
            ));
        }
        Ok(())
    }
}

/// A PVC's `dataSource`: only when the Sandbox is a fork, only a PVC of the same role that the
/// source owns in the cluster (any rootfs generation of it that is not being deleted: while a
/// reset of the source is under way, its status may still name the older one).
fn check_clone(
    scope: &SandboxScope,
    role: ChildRole,
    fields: &Fields<'_>,
    source: &Json<'_>,
) -> Result<(), Refusal> {
    let field = "spec.dataSource";
    fields.object(source, field, &["apiGroup", "kind", "name"])?;
    if source
        .get("apiGroup")
        .is_some_and(|g| g.as_str() != Some(""))
        || source.get("kind").and_then(Json::as_str) != Some("PersistentVolumeClaim")
    {
        return Err(fields.refuse(
            field,
            "a volume may be cloned only from a PersistentVolumeClaim",
        ));
    }
    let Some(fork) = &scope.fork else {
        return Err(fields.refuse(
            field,
            format!(
                "Sandbox {:?} is not a fork (no spec.forkFrom whose source the call was handed): \
                 its volumes may not clone another's",
                scope.name
            ),
        ));
    };
    let same_role = |name: &str| {
        matches!(
            (role, pvc_role(&fork.name, name)),
            (ChildRole::Workspace, Some(ChildRole::Workspace))
                | (ChildRole::Rootfs(_), Some(ChildRole::Rootfs(_)))
        )
    };
    let name = source.get("name").and_then(Json::as_str);
    if name.is_some_and(|n| same_role(n) && fork.pvcs.iter().any(|p| p == n)) {
        return Ok(());
    }
    let allowed: Vec<String> = fork
        .pvcs
        .iter()
        .filter(|p| same_role(p))
        .map(|p| format!("{p:?}"))
        .collect();
    Err(fields.refuse(
        format!("{field}.name"),
        format!(
            "{} is not a PVC of this role that the fork source {:?} owns (its name, labels and \
             controller reference, as the controller's cache holds them; not being deleted): {}",
            source.get("name").map_or("nothing".to_string(), short),
            fork.name,
            if allowed.is_empty() {
                "it has none".to_string()
            } else {
                allowed.join(", ")
            }
        ),
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::containment::tests::*;
    use crate::containment::*;
    use cubepod_policy_sdk::fixtures;

    /// The default policy's PVC writes for a fork of `src` whose status names `rootfs` and
    /// `workspace`, and the scope of the call, the source owning `owned`.
    fn fork_writes(
        rootfs: &str,
        workspace: &str,
        owned: &[&str],
    ) -> (SandboxScope, Vec<(Resource, String, Value)>) {
        let mut input = fixtures::sandbox("fork").forked_from("src").input();
        input.fork_source = Some(
            fixtures::sandbox("src")
                .with_status(|s| {
                    s.rootfs_pvc = Some(rootfs.into());
                    s.workspace_pvc = Some(workspace.into());
                })
                .build(),
        );
        let mut scope = scope_of(&input);
        if let Some(fork) = &mut scope.fork {
            fork.pvcs = owned.iter().map(|p| p.to_string()).collect();
        }
        let pvcs = writes(&input)
            .into_iter()
            .filter(|(r, _, _)| *r == Resource::PersistentVolumeClaim)
            .collect();
        (scope, pvcs)
    }

    #[test]
    fn a_fork_may_clone_only_the_pvcs_its_source_owns() {
        let rules = Containment::default();
        let owned = ["src-rootfs-g1", "src-rootfs-g2", "src-workspace"];
        let (scope, pvcs) = fork_writes("src-rootfs-g1", "src-workspace", &owned);
        assert_eq!(pvcs.len(), 2);
        for (resource, name, manifest) in &pvcs {
            assert_eq!(check_in(&rules, &scope, *resource, name, manifest), Ok(()));
            let with_source = |source: &str| {
                let mut edited = manifest.clone();
                edited["spec"]["dataSource"]["name"] = json!(source);
                check_in(&rules, &scope, *resource, name, &edited)
            };
            let workspace = name.ends_with("workspace");
            // Any generation of the source's rootfs it owns: a reset of it may be under way.
            if !workspace {
                assert_eq!(with_source("src-rootfs-g2"), Ok(()));
            }
            // The other role's volume, a generation it does not own, a second spelling of one
            // it does, or a stranger's: not a source.
            for source in [
                if workspace {
                    "src-rootfs-g1"
                } else {
                    "src-workspace"
                },
                "src-rootfs-g3",
                "src-rootfs-g01",
                "victim-workspace",
            ] {
                refused(with_source(source), Rule::Pvc, "spec.dataSource.name");
            }
        }
    }

    #[test]
    fn a_fork_source_status_naming_another_sandboxs_volumes_gives_no_clone_of_them() {
        let rules = Containment::default();
        // The source's status is the policy's to write: it names the victim's volumes, which the
        // source does not own.
        let owned = ["src-rootfs-g1", "src-workspace"];
        let (scope, pvcs) = fork_writes("victim-rootfs-g1", "victim-workspace", &owned);
        assert_eq!(pvcs.len(), 2);
        for (resource, name, manifest) in &pvcs {
            let reason = match check_in(&rules, &scope, *resource, name, manifest) {
                Err(refusal) => refusal.to_string(),
                Ok(()) => panic!("{name}: a clone of the victim's volume admitted"),
            };
            refused(
                check_in(&rules, &scope, *resource, name, manifest),
                Rule::Pvc,
                "spec.dataSource.name",
            );
            // The refusal names what the source does own.
            let own = if name.ends_with("workspace") {
                "\"src-workspace\""
            } else {
                "\"src-rootfs-g1\""
            };
            assert!(reason.contains(own), "{reason}");
        }
        // A source the cache holds nothing of (or no cache at all): nothing to clone.
        let (scope, pvcs) = fork_writes("src-rootfs-g1", "src-workspace", &[]);
        for (resource, name, manifest) in &pvcs {
            refused(
                check_in(&rules, &scope, *resource, name, manifest),
                Rule::Pvc,
                "spec.dataSource.name",
            );
        }
    }

    #[test]
    fn a_sandbox_that_is_not_a_fork_clones_nothing() {
        let mut clone = manifest_of(Resource::PersistentVolumeClaim, "dev-alice-workspace");
        clone["spec"]["dataSource"] =
            json!({"kind": "PersistentVolumeClaim", "name": "bob-workspace"});
        refused(
            check(
                &Containment::default(),
                Resource::PersistentVolumeClaim,
                "dev-alice-workspace",
                &clone,
            ),
            Rule::Pvc,
            "spec.dataSource",
        );
    }

    #[test]
    fn pvc_profile() {
        let name = "dev-alice-workspace";
        let refused_pvc = |edit: &dyn Fn(&mut Value), field: &str| {
            let mut manifest = manifest_of(Resource::PersistentVolumeClaim, name);
            edit(&mut manifest);
            refused(
                check(
                    &Containment::default(),
                    Resource::PersistentVolumeClaim,
                    name,
                    &manifest,
                ),
                Rule::Pvc,
                field,
            );
        };
        refused_pvc(
            &|m| m["spec"]["volumeMode"] = json!("Filesystem"),
            "spec.volumeMode",
        );
        refused_pvc(
            &|m| m["spec"]["volumeName"] = json!("pv-of-bob"),
            "spec.volumeName",
        );
        refused_pvc(
            &|m| m["spec"]["accessModes"] = json!(["ReadWriteMany"]),
            "spec.accessModes[0]",
        );
        refused_pvc(
            &|m| m["spec"]["resources"]["requests"]["storage"] = json!("2Ti"),
            "spec.resources.requests.storage",
        );
        refused_pvc(
            &|m| m["spec"]["resources"]["requests"]["storage"] = json!("lots"),
            "spec.resources.requests.storage",
        );
        refused_pvc(
            &|m| m["spec"]["storageClassName"] = json!("fast"),
            "spec.storageClassName",
        );
        refused_pvc(
            &|m| m["spec"]["dataSourceRef"] = json!({}),
            "spec.dataSourceRef",
        );
        let mut ok = manifest_of(Resource::PersistentVolumeClaim, name);
        ok["spec"]["resources"]["requests"]["storage"] = json!("1Ti");
        assert_eq!(
            check(
                &Containment::default(),
                Resource::PersistentVolumeClaim,
                name,
                &ok
            ),
            Ok(())
        );
    }
}

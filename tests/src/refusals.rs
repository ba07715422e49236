//! What the API server refuses of the CRDs (`deploy/crds/`), as the real kubectl prints it: one
//! row per rule (the structural schema's types, enums, bounds, patterns, lengths, required
//! fields, formats and list keys, the CEL rules, the status schema, a missing namespace), with
//! the lines a real API server (1.31) makes kubectl print. The embedded cluster
//! (`tests/tests/kubectl.rs`) and the tests' fake API server (`tests/tests/apiserver.rs`) are
//! both held to this one table: they serve the same code, and must say the same.

use crate::kubectl::Kubectl;

pub const NS: &str = "cubepod-workloads";

/// What a row does.
pub enum Action {
    /// `kubectl apply -f` of a Sandbox with this name and spec (JSON; `None`: no spec).
    Sandbox(&'static str, Option<&'static str>),
    /// `kubectl apply -f` of a PodWarmPool with this name and spec.
    Pool(&'static str, &'static str),
    /// `kubectl apply -f` of a whole manifest.
    Manifest(&'static str, String),
    /// `kubectl patch KIND NAME --type merge -p PATCH` (`--subresource=status` when `status`).
    Patch {
        kind: &'static str,
        name: &'static str,
        patch: &'static str,
        status: bool,
    },
}

pub struct Refusal {
    /// The rule refused.
    pub rule: &'static str,
    pub action: Action,
    /// kubectl's stderr, line by line, without trailing spaces; `{file}` is the manifest.
    pub says: Vec<String>,
}

/// The objects the patches of [`table`] change: created first, valid.
const BASE: &str = r#"apiVersion: cubepod.io/v1alpha1
kind: Sandbox
metadata: {name: strict-base, namespace: cubepod-workloads}
spec: {image: ghcr.io/cubepod/sandbox-base:1.0, rootfsGeneration: 2}
---
apiVersion: cubepod.io/v1alpha1
kind: Sandbox
metadata: {name: strict-fork, namespace: cubepod-workloads}
spec: {image: ghcr.io/cubepod/sandbox-base:1.0, forkFrom: strict-base}
---
apiVersion: cubepod.io/v1alpha1
kind: PodWarmPool
metadata: {name: strict-pool, namespace: cubepod-workloads}
spec: {replicas: 0, template: {image: ghcr.io/cubepod/sandbox-base:1.0}}
"#;

const QUANTITY: &str = r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$";
const DNS_LABEL: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
const BLOCKED: &str = "<nil>: Invalid value: \"null\": some validation rules were not checked \
                       because the object was invalid; correct the existing errors to complete \
                       validation";

/// One line: `The KIND "NAME" is invalid: ERROR`.
fn one(kind: &str, name: &str, error: &str) -> Vec<String> {
    vec![format!("The {kind} \"{name}\" is invalid: {error}")]
}

/// kubectl's list of several errors.
fn many(kind: &str, name: &str, errors: &[&str]) -> Vec<String> {
    let mut lines = vec![format!("The {kind} \"{name}\" is invalid:")];
    lines.extend(errors.iter().map(|e| format!("* {e}")));
    lines
}

/// An error that leaves the object without its schema's shape: the rules are not run, which
/// the API server says as a second error.
fn blocking(kind: &str, name: &str, error: &str) -> Vec<String> {
    many(kind, name, &[error, BLOCKED])
}

fn patch(kind: &'static str, name: &'static str, patch: &'static str) -> Action {
    Action::Patch {
        kind,
        name,
        patch,
        status: false,
    }
}

fn status(kind: &'static str, name: &'static str, patch: &'static str) -> Action {
    Action::Patch {
        kind,
        name,
        patch,
        status: true,
    }
}

/// Every rule, refused.
pub fn table() -> Vec<Refusal> {
    let sandbox = |rule, name, spec: &'static str, says| Refusal {
        rule,
        action: Action::Sandbox(name, Some(spec)),
        says,
    };
    let long_name = "r-name-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let long_pool = "r-pool-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let cidrs = format!(
        "[{}]",
        (0..65)
            .map(|i| format!("\"10.0.{i}.0/24\""))
            .collect::<Vec<_>>()
            .join(",")
    );
    let cidrs: &'static str = Box::leak(
        format!(r#"{{"image": "i", "network": {{"allowCIDRs": {cidrs}}}}}"#).into_boxed_str(),
    );
    vec![
        Refusal {
            rule: "Sandbox: spec is required",
            action: Action::Sandbox("r-no-spec", None),
            says: blocking("Sandbox", "r-no-spec", "spec: Required value"),
        },
        sandbox(
            "spec.image is required",
            "r-no-image",
            r#"{"desiredState": "Running"}"#,
            blocking("Sandbox", "r-no-image", "spec.image: Required value"),
        ),
        sandbox(
            "spec.image: minLength 1",
            "r-image",
            r#"{"image": ""}"#,
            one(
                "Sandbox",
                "r-image",
                "spec.image: Invalid value: \"\": spec.image in body should be at least 1 chars long",
            ),
        ),
        Refusal {
            rule: "spec.desiredState: enum",
            action: patch("sandbox", "strict-base", r#"{"spec":{"desiredState":"Stopped"}}"#),
            says: blocking(
                "Sandbox",
                "strict-base",
                "spec.desiredState: Unsupported value: \"Stopped\": supported values: \"Running\", \"Paused\"",
            ),
        },
        sandbox(
            "spec.rootfsGeneration: minimum 1",
            "r-generation",
            r#"{"image": "i", "rootfsGeneration": 0}"#,
            one(
                "Sandbox",
                "r-generation",
                "spec.rootfsGeneration: Invalid value: 0: spec.rootfsGeneration in body should be greater than or equal to 1",
            ),
        ),
        Refusal {
            rule: "spec.rootfsGeneration only goes up (CEL, oldSelf)",
            action: patch("sandbox", "strict-base", r#"{"spec":{"rootfsGeneration":1}}"#),
            says: one(
                "Sandbox",
                "strict-base",
                "spec.rootfsGeneration: Invalid value: \"object\": rootfsGeneration can only go up (raise it by one to reset the root filesystem)",
            ),
        },
        Refusal {
            rule: "spec.forkFrom is immutable: set after creation (CEL, oldSelf)",
            action: patch("sandbox", "strict-base", r#"{"spec":{"forkFrom":"strict-fork"}}"#),
            says: one(
                "Sandbox",
                "strict-base",
                "spec.forkFrom: Forbidden: forkFrom is immutable; it can only be set when the Sandbox is created",
            ),
        },
        Refusal {
            rule: "spec.forkFrom is immutable: changed",
            action: patch("sandbox", "strict-fork", r#"{"spec":{"forkFrom":"dev-bob"}}"#),
            says: one(
                "Sandbox",
                "strict-fork",
                "spec.forkFrom: Forbidden: forkFrom is immutable; it can only be set when the Sandbox is created",
            ),
        },
        Refusal {
            rule: "spec.forkFrom is immutable: removed",
            action: patch("sandbox", "strict-fork", r#"{"spec":{"forkFrom":null}}"#),
            says: one(
                "Sandbox",
                "strict-fork",
                "spec.forkFrom: Forbidden: forkFrom is immutable; it can only be set when the Sandbox is created",
            ),
        },
        Refusal {
            rule: "spec.warmPool is immutable: set after creation (CEL, oldSelf)",
            action: patch("sandbox", "strict-base", r#"{"spec":{"warmPool":"strict-pool"}}"#),
            says: one(
                "Sandbox",
                "strict-base",
                "spec.warmPool: Forbidden: warmPool is immutable; it can only be set when the Sandbox is created",
            ),
        },
        Refusal {
            rule: "spec.storage.workspaceSize is immutable (CEL, oldSelf)",
            action: patch(
                "sandbox",
                "strict-base",
                r#"{"spec":{"storage":{"workspaceSize":"20Gi"}}}"#,
            ),
            says: one(
                "Sandbox",
                "strict-base",
                "spec.storage.workspaceSize: Forbidden: workspaceSize is immutable; the workspace volume is made once, when the Sandbox is created",
            ),
        },
        Refusal {
            rule: "spec.storage.storageClassName is immutable: set after creation (CEL, oldSelf)",
            action: patch(
                "sandbox",
                "strict-base",
                r#"{"spec":{"storage":{"storageClassName":"fast"}}}"#,
            ),
            says: one(
                "Sandbox",
                "strict-base",
                "spec.storage.storageClassName: Forbidden: storageClassName is immutable; both volumes keep the class the Sandbox was created with",
            ),
        },
        sandbox(
            "spec.forkFrom: pattern",
            "r-fork-pattern",
            r#"{"image": "i", "forkFrom": "Dev_Bob"}"#,
            one(
                "Sandbox",
                "r-fork-pattern",
                &format!("spec.forkFrom: Invalid value: \"Dev_Bob\": spec.forkFrom in body should match '{DNS_LABEL}'"),
            ),
        ),
        sandbox(
            "spec.forkFrom: maxLength 63",
            "r-fork-long",
            r#"{"image": "i", "forkFrom": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}"#,
            blocking("Sandbox", "r-fork-long", "spec.forkFrom: Too long: may not be longer than 63"),
        ),
        Refusal {
            rule: "spec.idleTimeoutSeconds: minimum 0",
            action: patch("sandbox", "strict-base", r#"{"spec":{"idleTimeoutSeconds":-5}}"#),
            says: one(
                "Sandbox",
                "strict-base",
                "spec.idleTimeoutSeconds: Invalid value: -5: spec.idleTimeoutSeconds in body should be greater than or equal to 0",
            ),
        },
        Refusal {
            rule: "spec.idleTimeoutSeconds: type integer",
            action: patch("sandbox", "strict-base", r#"{"spec":{"idleTimeoutSeconds":"soon"}}"#),
            says: blocking(
                "Sandbox",
                "strict-base",
                "spec.idleTimeoutSeconds: Invalid value: \"string\": spec.idleTimeoutSeconds in body must be of type integer: \"string\"",
            ),
        },
        sandbox(
            "spec.resources.cpu: a quantity (pattern)",
            "r-cpu",
            r#"{"image": "i", "resources": {"cpu": "two"}}"#,
            one(
                "Sandbox",
                "r-cpu",
                &format!("spec.resources.cpu: Invalid value: \"two\": spec.resources.cpu in body should match '{QUANTITY}'"),
            ),
        ),
        sandbox(
            "spec.resources.memory: a quantity (pattern)",
            "r-memory",
            r#"{"image": "i", "resources": {"memory": "1 GB"}}"#,
            one(
                "Sandbox",
                "r-memory",
                &format!("spec.resources.memory: Invalid value: \"1 GB\": spec.resources.memory in body should match '{QUANTITY}'"),
            ),
        ),
        Refusal {
            rule: "spec.storage.rootfsSize: a quantity (pattern)",
            action: patch("sandbox", "strict-base", r#"{"spec":{"storage":{"rootfsSize":"lots"}}}"#),
            says: one(
                "Sandbox",
                "strict-base",
                &format!("spec.storage.rootfsSize: Invalid value: \"lots\": spec.storage.rootfsSize in body should match '{QUANTITY}'"),
            ),
        },
        sandbox(
            "spec.storage.workspaceSize: a quantity (pattern)",
            "r-workspace",
            r#"{"image": "i", "storage": {"workspaceSize": "10 gigs"}}"#,
            one(
                "Sandbox",
                "r-workspace",
                &format!("spec.storage.workspaceSize: Invalid value: \"10 gigs\": spec.storage.workspaceSize in body should match '{QUANTITY}'"),
            ),
        ),
        sandbox(
            "spec.storage.storageClassName: minLength 1",
            "r-class",
            r#"{"image": "i", "storage": {"storageClassName": ""}}"#,
            one(
                "Sandbox",
                "r-class",
                "spec.storage.storageClassName: Invalid value: \"\": spec.storage.storageClassName in body should be at least 1 chars long",
            ),
        ),
        sandbox(
            "spec.runtimeClassName: pattern",
            "r-runtime",
            r#"{"image": "i", "runtimeClassName": "Kata_QEMU"}"#,
            one(
                "Sandbox",
                "r-runtime",
                "spec.runtimeClassName: Invalid value: \"Kata_QEMU\": spec.runtimeClassName in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'",
            ),
        ),
        sandbox(
            "spec.warmPool: pattern",
            "r-pool-name",
            r#"{"image": "i", "warmPool": "Pool_1"}"#,
            one(
                "Sandbox",
                "r-pool-name",
                &format!("spec.warmPool: Invalid value: \"Pool_1\": spec.warmPool in body should match '{DNS_LABEL}'"),
            ),
        ),
        sandbox(
            "spec.network.egress: enum",
            "r-egress",
            r#"{"image": "i", "network": {"egress": "Everything"}}"#,
            blocking(
                "Sandbox",
                "r-egress",
                "spec.network.egress: Unsupported value: \"Everything\": supported values: \"Internet\", \"None\", \"Cluster\"",
            ),
        ),
        sandbox(
            "spec.network.allowCIDRs: maxItems 64",
            "r-cidrs",
            cidrs,
            blocking(
                "Sandbox",
                "r-cidrs",
                "spec.network.allowCIDRs: Too many: 65: must have at most 64 items",
            ),
        ),
        sandbox(
            "spec.network.denyCIDRs items: maxLength 43",
            "r-cidr-long",
            r#"{"image": "i", "network": {"denyCIDRs": ["2001:0db8:0000:0000:0000:0000:0000:0000/128xx"]}}"#,
            blocking(
                "Sandbox",
                "r-cidr-long",
                "spec.network.denyCIDRs[0]: Too long: may not be longer than 43",
            ),
        ),
        sandbox(
            "spec.service.ports is required",
            "r-service",
            r#"{"image": "i", "service": {}}"#,
            blocking("Sandbox", "r-service", "spec.service.ports: Required value"),
        ),
        sandbox(
            "spec.service.ports[]: name is required",
            "r-port-name",
            r#"{"image": "i", "service": {"ports": [{"port": 80}]}}"#,
            blocking(
                "Sandbox",
                "r-port-name",
                "spec.service.ports[0].name: Required value",
            ),
        ),
        sandbox(
            "spec.service.ports[].name: pattern",
            "r-port-pattern",
            r#"{"image": "i", "service": {"ports": [{"name": "Web", "port": 80}]}}"#,
            one(
                "Sandbox",
                "r-port-pattern",
                &format!("spec.service.ports[0].name: Invalid value: \"Web\": spec.service.ports[0].name in body should match '{DNS_LABEL}'"),
            ),
        ),
        sandbox(
            "spec.service.ports[].port: maximum 65535",
            "r-port-max",
            r#"{"image": "i", "service": {"ports": [{"name": "web", "port": 70000}]}}"#,
            one(
                "Sandbox",
                "r-port-max",
                "spec.service.ports[0].port: Invalid value: 70000: spec.service.ports[0].port in body should be less than or equal to 65535",
            ),
        ),
        sandbox(
            "spec.service.ports[].protocol: enum",
            "r-protocol",
            r#"{"image": "i", "service": {"ports": [{"name": "web", "port": 80, "protocol": "HTTP"}]}}"#,
            blocking(
                "Sandbox",
                "r-protocol",
                "spec.service.ports[0].protocol: Unsupported value: \"HTTP\": supported values: \"TCP\", \"UDP\", \"SCTP\"",
            ),
        ),
        sandbox(
            "spec.service.ports: list-type map, keys port and protocol unique (after defaulting)",
            "r-ports-twice",
            r#"{"image": "i", "service": {"ports": [{"name": "a", "port": 80}, {"name": "b", "port": 80, "protocol": "TCP"}]}}"#,
            one(
                "Sandbox",
                "r-ports-twice",
                "spec.service.ports[1]: Duplicate value: map[string]interface {}{\"port\":80, \"protocol\":\"TCP\"}",
            ),
        ),
        sandbox(
            "spec.shutdownTime: format date-time",
            "r-shutdown",
            r#"{"image": "i", "shutdownTime": "tomorrow"}"#,
            blocking(
                "Sandbox",
                "r-shutdown",
                "spec.shutdownTime: Invalid value: \"tomorrow\": spec.shutdownTime in body must be of type date-time: \"tomorrow\"",
            ),
        ),
        sandbox(
            "spec.shutdownPolicy: enum",
            "r-shutdown-policy",
            r#"{"image": "i", "shutdownPolicy": "Keep"}"#,
            blocking(
                "Sandbox",
                "r-shutdown-policy",
                "spec.shutdownPolicy: Unsupported value: \"Keep\": supported values: \"Delete\", \"Pause\"",
            ),
        ),
        sandbox(
            "Sandbox name: at most 63 characters (CEL, the root)",
            long_name,
            r#"{"image": "i"}"#,
            one(
                "Sandbox",
                long_name,
                "<nil>: Invalid value: \"object\": a Sandbox name must be at most 63 characters (it is used as a label value)",
            ),
        ),
        sandbox(
            "metadata.name: an RFC 1123 subdomain",
            "r-Upper",
            r#"{"image": "i"}"#,
            one(
                "Sandbox",
                "r-Upper",
                "metadata.name: Invalid value: \"r-Upper\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ),
        ),
        Refusal {
            rule: "status.phase: enum (the status subresource)",
            action: status("sandbox", "strict-base", r#"{"status":{"phase":"Sleeping"}}"#),
            says: blocking(
                "Sandbox",
                "strict-base",
                "status.phase: Unsupported value: \"Sleeping\": supported values: \"Pending\", \"Running\", \"Paused\", \"Terminating\", \"Failed\"",
            ),
        },
        Refusal {
            rule: "status.conditions[].reason: pattern",
            action: status(
                "sandbox",
                "strict-base",
                r#"{"status":{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-01-01T00:00:00Z","reason":"not ok","message":""}]}}"#,
            ),
            says: one(
                "Sandbox",
                "strict-base",
                "status.conditions[0].reason: Invalid value: \"not ok\": status.conditions[0].reason in body should match '^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$'",
            ),
        },
        Refusal {
            rule: "a field the schema does not know (fieldValidation Strict)",
            action: Action::Sandbox("r-unknown", Some(r#"{"image": "i", "colour": "blue"}"#)),
            says: vec![
                "Error from server (BadRequest): error when creating \"{file}\": Sandbox in version \"v1alpha1\" cannot be handled as a Sandbox: strict decoding error: unknown field \"spec.colour\"".into(),
            ],
        },
        Refusal {
            rule: "the namespace must exist",
            action: Action::Manifest(
                "r-namespace",
                "apiVersion: cubepod.io/v1alpha1\nkind: Sandbox\nmetadata: {name: r-namespace, namespace: nowhere}\nspec: {image: i}\n".into(),
            ),
            says: vec![
                "Error from server (NotFound): error when creating \"{file}\": namespaces \"nowhere\" not found".into(),
            ],
        },
        Refusal {
            rule: "PodWarmPool: spec.replicas is required",
            action: Action::Pool("r-pool-replicas", r#"{"template": {"image": "i"}}"#),
            says: blocking("PodWarmPool", "r-pool-replicas", "spec.replicas: Required value"),
        },
        Refusal {
            rule: "PodWarmPool: spec.replicas maximum 1000",
            action: Action::Pool("r-pool-max", r#"{"replicas": 1001, "template": {"image": "i"}}"#),
            says: one(
                "PodWarmPool",
                "r-pool-max",
                "spec.replicas: Invalid value: 1001: spec.replicas in body should be less than or equal to 1000",
            ),
        },
        Refusal {
            rule: "PodWarmPool: spec.replicas minimum 0",
            action: patch("podwarmpool", "strict-pool", r#"{"spec":{"replicas":-1}}"#),
            says: one(
                "PodWarmPool",
                "strict-pool",
                "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
            ),
        },
        Refusal {
            rule: "PodWarmPool: spec.updateStrategy enum",
            action: Action::Pool(
                "r-pool-strategy",
                r#"{"replicas": 1, "updateStrategy": "Rolling", "template": {"image": "i"}}"#,
            ),
            says: blocking(
                "PodWarmPool",
                "r-pool-strategy",
                "spec.updateStrategy: Unsupported value: \"Rolling\": supported values: \"Recreate\", \"OnReplenish\"",
            ),
        },
        Refusal {
            rule: "PodWarmPool: spec.template.image is required",
            action: Action::Pool("r-pool-image", r#"{"replicas": 1, "template": {}}"#),
            says: blocking("PodWarmPool", "r-pool-image", "spec.template.image: Required value"),
        },
        Refusal {
            rule: "PodWarmPool: spec.template.rootfsGeneration minimum 1",
            action: Action::Pool(
                "r-pool-generation",
                r#"{"replicas": 1, "template": {"image": "i", "rootfsGeneration": 0}}"#,
            ),
            says: one(
                "PodWarmPool",
                "r-pool-generation",
                "spec.template.rootfsGeneration: Invalid value: 0: spec.template.rootfsGeneration in body should be greater than or equal to 1",
            ),
        },
        Refusal {
            rule: "PodWarmPool name: at most 63 characters (CEL, the root)",
            action: Action::Pool(long_pool, r#"{"replicas": 0, "template": {"image": "i"}}"#),
            says: one(
                "PodWarmPool",
                long_pool,
                "<nil>: Invalid value: \"object\": a PodWarmPool name must be at most 63 characters (it is used as a label value)",
            ),
        },
        Refusal {
            rule: "PodWarmPool: status.readyReplicas minimum 0 (the status subresource)",
            action: status("podwarmpool", "strict-pool", r#"{"status":{"readyReplicas":-1}}"#),
            says: one(
                "PodWarmPool",
                "strict-pool",
                "status.readyReplicas: Invalid value: -1: status.readyReplicas in body should be greater than or equal to 0",
            ),
        },
        Refusal {
            rule: "PolicyRollout: canary weights never shrink (CEL, isSorted)",
            action: Action::Manifest(
                "r-rollout-shrinks",
                format!(
                    "apiVersion: cubepod.io/v1alpha1\nkind: PolicyRollout\nmetadata: {{name: r-rollout-shrinks, namespace: {NS}}}\nspec:\n  module: {{configMap: m}}\n  strategy:\n    type: Progressive\n    canary:\n      steps: [{{weight: 50, duration: 1m}}, {{weight: 10, duration: 1m}}]\n"
                ),
            ),
            says: one(
                "PolicyRollout",
                "r-rollout-shrinks",
                "spec.strategy.canary.steps: Invalid value: \"array\": each step's weight must be at least the one before it (a canary's share only grows)",
            ),
        },
    ]
}

/// The manifest of a create row.
fn manifest(action: &Action) -> Option<(String, String)> {
    match action {
        Action::Sandbox(name, spec) => {
            let spec = spec.map(|s| format!("spec: {s}\n")).unwrap_or_default();
            Some((
                (*name).to_owned(),
                format!(
                    "apiVersion: cubepod.io/v1alpha1\nkind: Sandbox\nmetadata: {{name: {name}, namespace: {NS}}}\n{spec}"
                ),
            ))
        }
        Action::Pool(name, spec) => Some((
            (*name).to_owned(),
            format!(
                "apiVersion: cubepod.io/v1alpha1\nkind: PodWarmPool\nmetadata: {{name: {name}, namespace: {NS}}}\nspec: {spec}\n"
            ),
        )),
        Action::Manifest(name, text) => Some(((*name).to_owned(), text.clone())),
        Action::Patch { .. } => None,
    }
}

/// Runs every row of [`table`] with `kubectl` against a cluster that has the `cubepod-workloads`
/// namespace; panics listing every row whose refusal kubectl did not print as expected (or
/// whose object was written all the same).
pub fn check(kubectl: &Kubectl) {
    let base = kubectl.write("strict-base.yaml", BASE);
    kubectl.ok(&["apply", "-f", base.to_str().unwrap_or_default()]);
    let mut wrong = Vec::new();
    for row in table() {
        let (out, file, created) = match manifest(&row.action) {
            Some((name, text)) => {
                let path = kubectl.write(&format!("{name}.yaml"), &text);
                let file = path.to_string_lossy().into_owned();
                let out = kubectl.run(&["apply", "-f", &file]);
                (out, file, Some(name))
            }
            None => {
                let Action::Patch {
                    kind,
                    name,
                    patch,
                    status,
                } = row.action
                else {
                    continue;
                };
                let mut args = vec![
                    "patch", kind, name, "-n", NS, "--type", "merge", "-p", patch,
                ];
                if status {
                    args.push("--subresource=status");
                }
                (kubectl.run(&args), String::new(), None)
            }
        };
        let said: Vec<String> = String::from_utf8_lossy(&out.stderr)
            .lines()
            .map(|l| l.trim_end().to_owned())
            .collect();
        let says: Vec<String> = row
            .says
            .iter()
            .map(|l| l.replace("{file}", &file))
            .collect();
        if out.status.success() || said != says {
            wrong.push(format!(
                "{}\n  expected:\n    {}\n  kubectl said (exit {:?}):\n    {}",
                row.rule,
                says.join("\n    "),
                out.status.code(),
                said.join("\n    ")
            ));
        }
        if let Some(name) = created {
            let kind = match &row.action {
                Action::Pool(..) => "podwarmpool".to_owned(),
                Action::Manifest(_, text) => text
                    .lines()
                    .find_map(|l| l.strip_prefix("kind: "))
                    .map_or_else(|| "sandbox".to_owned(), |k| k.trim().to_lowercase()),
                _ => "sandbox".to_owned(),
            };
            let namespace = if name == "r-namespace" { "nowhere" } else { NS };
            if kubectl
                .run(&["get", &kind, &name, "-n", namespace])
                .status
                .success()
            {
                wrong.push(format!(
                    "{}: {kind} {name} was created all the same",
                    row.rule
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} rows differ:\n\n{}",
        wrong.len(),
        table().len(),
        wrong.join("\n\n")
    );
}

/// A user's Sandbox with only an image shows the CRD's defaults in `kubectl get sandboxes`
/// (DESIRED Running, GEN 1); a missing Sandbox and a missing namespace are NotFound, worded as
/// the API server words them.
pub fn check_defaults_and_not_found(kubectl: &Kubectl) {
    let manifest = format!(
        "apiVersion: cubepod.io/v1alpha1\nkind: Sandbox\nmetadata: {{name: r-defaults, namespace: {NS}}}\nspec: {{image: ghcr.io/cubepod/sandbox-base:1.0}}\n"
    );
    let path = kubectl.write("r-defaults.yaml", &manifest);
    kubectl.ok(&["apply", "-f", path.to_str().unwrap_or_default()]);
    let table = kubectl.ok(&["get", "sandboxes", "-n", NS]);
    let header = table.lines().next().unwrap_or_default();
    let row = table
        .lines()
        .find(|l| l.starts_with("r-defaults "))
        .unwrap_or_else(|| panic!("no r-defaults row in:\n{table}"));
    let cell = |column: &str| {
        let start = header
            .find(column)
            .unwrap_or_else(|| panic!("no {column} column in:\n{table}"));
        row.get(start..)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(cell("DESIRED"), "Running", "{table}");
    assert_eq!(cell("GEN"), "1", "{table}");
    let spec = kubectl.ok(&[
        "get",
        "sandbox",
        "r-defaults",
        "-n",
        NS,
        "-o",
        "jsonpath={.spec}",
    ]);
    let spec: serde_json::Value = serde_json::from_str(&spec).expect("the spec is JSON");
    assert_eq!(spec["storage"]["rootfsSize"], "10Gi", "{spec}");
    assert_eq!(spec["network"]["egress"], "Internet", "{spec}");
    assert_eq!(spec["shutdownPolicy"], "Delete", "{spec}");

    for (namespace, line) in [
        (
            NS,
            "Error from server (NotFound): sandboxes.cubepod.io \"nope\" not found",
        ),
        (
            "nowhere",
            "Error from server (NotFound): namespaces \"nowhere\" not found",
        ),
    ] {
        let out = kubectl.run(&["get", "sandbox", "nope", "-n", namespace]);
        assert!(!out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stderr).trim_end(), line);
    }
    let namespaces = kubectl.ok(&["get", "namespaces"]);
    assert!(
        namespaces
            .lines()
            .any(|l| l.split_whitespace().take(2).eq([NS, "Active"])),
        "{namespaces}"
    );
}

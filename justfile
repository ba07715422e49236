# cubepod-controller developer recipes. `just` lists them.

# List the recipes.
default:
    @just --list

# Run the controller (embedded in-memory cluster when no kubeconfig is found).
run *ARGS:
    cargo run -p cubepod-host --bin cubepod-controller -- run {{ARGS}}

# Run the whole test suite, as the README says.
test:
    cargo test --workspace

# Unit tests of the default decisions (the SDK) and the default policy only (fast, native).
test-policy:
    cargo test -p cubepod-policy-sdk -p cubepod-guest

# Build the default policy component and print its size.
component:
    cargo build -p cubepod-guest --release --target wasm32-wasip2
    @ls -l target/wasm32-wasip2/release/cubepod_guest.wasm

# Validate deploy/ and the policy's manifests strictly against the Kubernetes schemas.
validate:
    cargo run -q -p cubepod-policy-sdk --example emit_manifests -- target/emitted-manifests
    bash .ci/validate-k8s target/emitted-manifests

# Format and lint, as CI does.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    for crate in cubepod-policy-sdk cubepod-guest cubepod-policy-guarded cubepod-policy-image-allowlist cubepod-faulty-policy cubepod-hostile-policy cubepod-nostd-policy; do cargo clippy -p "$crate" --target wasm32-wasip2 -- -D warnings; done

# Benchmarks: the micro-benchmarks (one decision natively and through wasm, a hot swap), then
# the controller against the fake API server with a load generator (`cubepod-bench`; e.g.
# `just bench --quick`, or `just bench --write-docs` to rewrite docs/performance.md).
bench *ARGS:
    cargo bench -p cubepod-policy-sdk --bench decision
    cargo bench -p cubepod-tests --bench reconcile
    cargo bench -p cubepod-tests --bench swap
    cargo build --release -p cubepod-host
    cargo run --release -p cubepod-tests --bin cubepod-bench -- {{ARGS}}

# Everything CI runs.
ci:
    bash .ci/run

# The fault-injection soak: the mixed scenario with more sandboxes and seeds (debug build).
# Override with CUBEPOD_SOAK_SANDBOXES, CUBEPOD_SOAK_SEEDS, CUBEPOD_FAULT_SEED (the first seed).
soak sandboxes=env_var_or_default("CUBEPOD_SOAK_SANDBOXES", "2000") seeds=env_var_or_default("CUBEPOD_SOAK_SEEDS", "20"):
    cargo build -p cubepod-host
    CUBEPOD_SOAK_SANDBOXES={{sandboxes}} CUBEPOD_SOAK_SEEDS={{seeds}} cargo test -p cubepod-tests --test faults soak -- --ignored --nocapture

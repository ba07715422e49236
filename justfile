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

# Unit tests of the default policy only (fast, native).
test-policy:
    cargo test -p cubepod-guest

# Build the default policy component and print its size.
component:
    cargo build -p cubepod-guest --release --target wasm32-wasip2
    @ls -l target/wasm32-wasip2/release/cubepod_guest.wasm

# Validate deploy/ and the policy's manifests strictly against the Kubernetes schemas.
validate:
    cargo run -q -p cubepod-guest --example emit_manifests -- target/emitted-manifests
    bash .ci/validate-k8s target/emitted-manifests

# Format and lint, as CI does.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    cargo clippy -p cubepod-guest --target wasm32-wasip2 -- -D warnings

# Benchmark one reconcile decision natively.
bench:
    cargo bench -p cubepod-guest --bench decision

# Everything CI runs.
ci:
    bash .ci/run

//! The default policy component (`guest/`), built by `host/build.rs` and embedded in the binary
//! so that the controller runs without a policy ConfigMap.

/// The bytes of `cubepod_guest.wasm`, built with the `guest-release` profile.
pub static DEFAULT_POLICY: &[u8] = include_bytes!(env!("CUBEPOD_DEFAULT_POLICY"));

use crate::prelude::*;
use alloc::collections::BTreeMap;

use serde::Serialize;

use super::meta::{ObjectMeta, Owner};

/// The key of the sandbox's access token in its Secret.
pub const TOKEN_KEY: &str = "token";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Secret<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: ObjectMeta<'a>,
    #[serde(rename = "type")]
    kind_of_secret: &'static str,
    // stringData lets the API server do the base64, so the policy needs no encoder.
    string_data: BTreeMap<&'static str, &'a str>,
}

pub fn secret(name: &str, namespace: &str, owner: Owner<'_>, token: &str) -> String {
    let mut string_data = BTreeMap::new();
    string_data.insert(TOKEN_KEY, token);
    super::to_json(&Secret {
        api_version: "v1",
        kind: "Secret",
        metadata: ObjectMeta::child_of(name, namespace, owner),
        kind_of_secret: "Opaque",
        string_data,
    })
}

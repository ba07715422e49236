//! URLs the API server serves, parsed into what they address: discovery and OpenAPI
//! documents, a namespaced collection, or one object (optionally its `status`), plus the query.

use std::time::Duration;

use super::events_v1;
use super::reviews::Review;
use super::table::IncludeObject;
use cubepod_kube::Resource;

/// The group of the CRDs that `set_crds_installed(false)` hides.
pub(crate) const CRD_GROUP: &str = "cubepod.io";

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// `GET /version`.
    Version,
    /// `GET /api`: the core group's versions.
    CoreVersions,
    /// `GET /apis`: the API groups.
    Groups,
    /// `GET /openapi/v3`: where each group version's document is.
    OpenApiIndex,
    /// `GET /openapi/v3/api/v1`, `GET /openapi/v3/apis/{group}/{version}`.
    OpenApi { group_version: &'static str },
    /// `GET /api/v1`, `GET /apis/{group}/{version}`: an APIResourceList.
    Resources { group_version: &'static str },
    Collection {
        resource: Resource,
        /// `""`: all namespaces (`/api/v1/pods`), for list and watch.
        namespace: String,
    },
    Object {
        resource: Resource,
        namespace: String,
        name: String,
        /// The `/status` subresource.
        status: bool,
    },
    /// `GET /api/v1/namespaces`.
    Namespaces,
    /// `GET /api/v1/namespaces/{name}`.
    Namespace { name: String },
    /// The `/scale` subresource of a kind that has one ([`has_scale`]): an autoscaling/v1
    /// Scale over the object's replicas.
    Scale {
        resource: Resource,
        namespace: String,
        name: String,
    },
    /// `POST` of a TokenReview or a SubjectAccessReview (`reviews.rs`).
    Review(Review),
}

impl Route {
    /// The resource addressed, if any (for fault matching and request records).
    pub(crate) fn resource(&self) -> Option<Resource> {
        match self {
            Route::Collection { resource, .. }
            | Route::Object { resource, .. }
            | Route::Scale { resource, .. } => Some(*resource),
            _ => None,
        }
    }
}

/// Kinds with a `/status` endpoint.
pub(crate) fn has_status(resource: Resource) -> bool {
    matches!(
        resource,
        Resource::Sandbox
            | Resource::PodWarmPool
            | Resource::PolicyRollout
            | Resource::Pod
            | Resource::PersistentVolumeClaim
    )
}

/// Kinds with a `/scale` endpoint: the CRD's scale subresource.
pub(crate) fn has_scale(resource: Resource) -> bool {
    resource == Resource::PodWarmPool
}

/// `""` for the core group.
pub(crate) fn group(resource: Resource) -> &'static str {
    resource.descriptor().group
}

/// Whether `resource` is served in `group_version`: its own, and Events in events.k8s.io/v1
/// too.
pub(crate) fn served_in(resource: Resource, group_version: &str) -> bool {
    resource.api_version() == group_version
        || (resource == Resource::Event && group_version == events_v1::GROUP_VERSION)
}

/// The group versions served: the core one first.
pub(crate) fn group_versions(crds_installed: bool) -> Vec<&'static str> {
    let mut versions: Vec<&'static str> = vec![events_v1::GROUP_VERSION];
    for resource in Resource::ALL {
        let version = resource.api_version();
        let hidden = !crds_installed && group(resource) == CRD_GROUP;
        if !hidden && !versions.contains(&version) {
            versions.push(version);
        }
    }
    versions.sort_by_key(|v| (v.contains('/'), *v));
    versions
}

/// Parses a request path; `None` when the server does not serve it (a 404).
pub(crate) fn parse(path: &str, crds_installed: bool) -> Option<Route> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    if segments.iter().any(|s| s.is_empty()) {
        return None;
    }
    if let Some(review) = super::reviews::route(&segments) {
        return Some(Route::Review(review));
    }
    let (group_version, rest): (String, &[&str]) = match segments.as_slice() {
        ["version"] => return Some(Route::Version),
        ["api"] => return Some(Route::CoreVersions),
        ["apis"] => return Some(Route::Groups),
        ["openapi", "v3"] => return Some(Route::OpenApiIndex),
        ["openapi", "v3", "api", "v1"] => {
            return Some(Route::OpenApi {
                group_version: "v1",
            });
        }
        ["openapi", "v3", "apis", group, version] => {
            let group_version = format!("{group}/{version}");
            return group_versions(crds_installed)
                .into_iter()
                .find(|v| *v == group_version && super::openapi::has(v, crds_installed))
                .map(|group_version| Route::OpenApi { group_version });
        }
        ["api", version, rest @ ..] => ((*version).to_owned(), rest),
        ["apis", group, version, rest @ ..] => (format!("{group}/{version}"), rest),
        _ => return None,
    };
    let group_version = group_versions(crds_installed)
        .into_iter()
        .find(|v| *v == group_version)?;
    let (namespace, plural, name, subresource) = match rest {
        [] => return Some(Route::Resources { group_version }),
        ["namespaces"] if group_version == "v1" => return Some(Route::Namespaces),
        ["namespaces", name] if group_version == "v1" => {
            return Some(Route::Namespace {
                name: (*name).to_owned(),
            });
        }
        // All namespaces: list and watch only.
        [plural] => ("", *plural, None, None),
        ["namespaces", ns, plural] => (*ns, *plural, None, None),
        ["namespaces", ns, plural, name] => (*ns, *plural, Some(*name), None),
        ["namespaces", ns, plural, name, sub] => (*ns, *plural, Some(*name), Some(*sub)),
        _ => return None,
    };
    let resource = Resource::ALL
        .into_iter()
        .find(|r| served_in(*r, group_version) && r.plural() == plural)?;
    let namespace = namespace.to_owned();
    Some(match (name, subresource) {
        (None, _) => Route::Collection {
            resource,
            namespace,
        },
        (Some(name), None) => Route::Object {
            resource,
            namespace,
            name: name.to_owned(),
            status: false,
        },
        (Some(name), Some("status")) if has_status(resource) => Route::Object {
            resource,
            namespace,
            name: name.to_owned(),
            status: true,
        },
        (Some(name), Some("scale")) if has_scale(resource) => Route::Scale {
            resource,
            namespace,
            name: name.to_owned(),
        },
        (Some(_), Some(_)) => return None,
    })
}

/// `fieldValidation` of a create or patch: what to do with fields the schema does not know.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum FieldValidation {
    Ignore,
    /// The API server's default: a `Warning` header per unknown field.
    #[default]
    Warn,
    /// Refused, 400, naming the fields.
    Strict,
}

/// The parameters of a query string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Query {
    pub(crate) label_selector: Option<String>,
    pub(crate) field_selector: Option<String>,
    pub(crate) watch: bool,
    pub(crate) resource_version: Option<String>,
    pub(crate) allow_watch_bookmarks: bool,
    pub(crate) timeout: Option<Duration>,
    /// A list's page size (`limit`; 0 or absent: everything).
    pub(crate) limit: Option<u32>,
    /// Where a paginated list goes on (`continue`).
    pub(crate) continue_token: Option<String>,
    /// A Table's rows carry (`includeObject`).
    pub(crate) include_object: IncludeObject,
    pub(crate) field_validation: FieldValidation,
    /// `dryRun=All`: not supported, so refused rather than written.
    pub(crate) dry_run: bool,
    /// Who a write's fields are recorded for (`fieldManager`).
    pub(crate) field_manager: Option<String>,
    /// A server-side apply takes over the fields it conflicts on (`force`).
    pub(crate) force: bool,
}

/// A query parameter the server cannot honour.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct QueryError(String);

impl Query {
    /// Parses the query string; unknown parameters are ignored, as by the API server, but one
    /// the fake would silently get wrong (`fieldSelector`) is refused.
    pub(crate) fn parse(query: &str) -> Result<Self, QueryError> {
        let mut parsed = Query::default();
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            match key.as_ref() {
                "labelSelector" => parsed.label_selector = Some(value.into_owned()),
                "watch" => parsed.watch = parse_bool(&key, &value)?,
                "allowWatchBookmarks" => parsed.allow_watch_bookmarks = parse_bool(&key, &value)?,
                "resourceVersion" => parsed.resource_version = Some(value.into_owned()),
                "timeoutSeconds" => {
                    let seconds = value
                        .parse::<u64>()
                        .map_err(|_| QueryError(format!("invalid timeoutSeconds: {value:?}")))?;
                    parsed.timeout = Some(Duration::from_secs(seconds));
                }
                "limit" => {
                    let limit = value
                        .parse::<i64>()
                        .map_err(|_| QueryError(format!("invalid limit: {value:?}")))?;
                    // The API server treats a limit of 0 or less as none.
                    parsed.limit = u32::try_from(limit).ok().filter(|l| *l > 0);
                }
                "continue" if !value.is_empty() => {
                    parsed.continue_token = Some(value.into_owned());
                }
                "fieldSelector" if !value.is_empty() => {
                    parsed.field_selector = Some(value.into_owned());
                }
                "includeObject" => {
                    parsed.include_object = IncludeObject::parse(&value)
                        .ok_or_else(|| QueryError(format!("invalid includeObject: {value:?}")))?;
                }
                "fieldValidation" => {
                    parsed.field_validation = match value.as_ref() {
                        "Ignore" => FieldValidation::Ignore,
                        "Warn" | "" => FieldValidation::Warn,
                        "Strict" => FieldValidation::Strict,
                        _ => {
                            return Err(QueryError(format!(
                                "fieldValidation must be Ignore, Warn or Strict, not {value:?}"
                            )));
                        }
                    };
                }
                "dryRun" if !value.is_empty() => parsed.dry_run = true,
                "fieldManager" if !value.is_empty() => {
                    parsed.field_manager = Some(value.into_owned());
                }
                "force" => parsed.force = parse_bool(&key, &value)?,
                _ => {}
            }
        }
        Ok(parsed)
    }
}

/// Go's `strconv.ParseBool`, which the API server's query decoding uses; empty is false.
fn parse_bool(key: &str, value: &str) -> Result<bool, QueryError> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "" | "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(QueryError(format!("invalid {key}: {value:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(resource: Resource, name: &str, status: bool) -> Option<Route> {
        Some(Route::Object {
            resource,
            namespace: "ns".into(),
            name: name.into(),
            status,
        })
    }

    #[test]
    fn paths_of_every_resource_round_trip() {
        for resource in Resource::ALL {
            assert_eq!(
                parse(&resource.collection_path("ns"), true),
                Some(Route::Collection {
                    resource,
                    namespace: "ns".into()
                })
            );
            assert_eq!(
                parse(&resource.object_path("ns", "a"), true),
                object(resource, "a", false)
            );
            let status = format!("{}/status", resource.object_path("ns", "a"));
            let expected = has_status(resource)
                .then(|| object(resource, "a", true))
                .flatten();
            assert_eq!(parse(&status, true), expected);
            let scale = format!("{}/scale", resource.object_path("ns", "a"));
            let expected = has_scale(resource).then(|| Route::Scale {
                resource,
                namespace: "ns".into(),
                name: "a".into(),
            });
            assert_eq!(parse(&scale, true), expected);
        }
    }

    #[test]
    fn crds_can_be_hidden_and_unknown_paths_are_none() {
        let path = Resource::Sandbox.collection_path("ns");
        assert_eq!(parse(&path, false), None);
        assert_eq!(parse("/apis/cubepod.io/v1alpha1", false), None);
        assert_eq!(parse("/api/v1/namespaces/ns/endpoints", true), None);
        assert_eq!(parse("/api/v1/namespaces//pods", true), None);
        assert_eq!(parse("/api/v1/namespaces/ns/pods/a/exec", true), None);
        assert_eq!(parse("/", true), None);
        assert_eq!(
            parse("/apis/cubepod.io/v1alpha1/", true),
            Some(Route::Resources {
                group_version: "cubepod.io/v1alpha1"
            })
        );
        assert_eq!(parse("/version", true), Some(Route::Version));
        assert_eq!(
            parse("/api/v1/pods", true),
            Some(Route::Collection {
                resource: Resource::Pod,
                namespace: String::new()
            })
        );
        assert_eq!(parse("/api/v1/namespaces", true), Some(Route::Namespaces));
        assert_eq!(
            parse("/api/v1/namespaces/default", true),
            Some(Route::Namespace {
                name: "default".into()
            })
        );
        assert_eq!(parse("/apis/cubepod.io/v1alpha1/namespaces", true), None);
        assert_eq!(parse("/openapi/v3", true), Some(Route::OpenApiIndex));
        assert_eq!(
            parse("/openapi/v3/apis/cubepod.io/v1alpha1", true),
            Some(Route::OpenApi {
                group_version: "cubepod.io/v1alpha1"
            })
        );
        assert_eq!(parse("/openapi/v3/apis/cubepod.io/v1alpha1", false), None);
        assert_eq!(
            parse("/openapi/v3/api/v1", false),
            Some(Route::OpenApi {
                group_version: "v1"
            })
        );
        assert_eq!(
            parse("/apis/events.k8s.io/v1/namespaces/ns/events/e", false),
            object(Resource::Event, "e", false)
        );
        assert_eq!(
            parse("/apis/events.k8s.io/v1/namespaces/ns/pods", false),
            None
        );
    }

    #[test]
    fn queries_parse_like_the_api_server() {
        let query = Query::parse(
            "watch=1&resourceVersion=12&allowWatchBookmarks=true&timeoutSeconds=5&labelSelector=a%3Db%2Cc",
        )
        .unwrap();
        assert!(query.watch && query.allow_watch_bookmarks);
        assert_eq!(query.resource_version.as_deref(), Some("12"));
        assert_eq!(query.timeout, Some(Duration::from_secs(5)));
        assert_eq!(query.label_selector.as_deref(), Some("a=b,c"));
        assert!(Query::parse("watch=maybe").is_err());
        assert!(Query::parse("timeoutSeconds=-1").is_err());
        let fields =
            Query::parse("fieldSelector=metadata.name%3Dx&fieldValidation=Strict").unwrap();
        assert_eq!(fields.field_selector.as_deref(), Some("metadata.name=x"));
        assert_eq!(fields.field_validation, FieldValidation::Strict);
        assert!(Query::parse("fieldValidation=Loose").is_err());
        assert!(Query::parse("dryRun=All").unwrap().dry_run);
        let apply = Query::parse("fieldManager=kubectl&force=true").unwrap();
        assert_eq!(apply.field_manager.as_deref(), Some("kubectl"));
        assert!(apply.force);
        assert_eq!(
            Query::parse("limit=0&fieldSelector=&continue=").unwrap(),
            Query::default()
        );
        let page = Query::parse("limit=500&continue=7%2Fns%2Fa").unwrap();
        assert_eq!(page.limit, Some(500));
        assert_eq!(page.continue_token.as_deref(), Some("7/ns/a"));
    }
}

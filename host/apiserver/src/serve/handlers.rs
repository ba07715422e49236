//! One request, end to end: the layer (if any), auth, routing, the verb against the
//! MemoryCluster, the response (JSON, a Table or the metadata alone) and its record.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{
    ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, USER_AGENT, WARNING,
};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode};
use rand::Rng;
use rand::distr::Alphanumeric;
use serde_json::{Value, json};

use super::body::{self, Body};
use super::fields::FieldSelector;
use super::partial;
use super::render::Render;
use super::request_body::{read_json, read_object, read_yaml_object};
use super::routes::{self, FieldValidation, Query, Route};
use super::status::{self, Failure};
use super::table::{self, IncludeObject};
use super::watch::{WatchBody, WatchPlan};
use super::{Layer, RequestInfo, Verdict, discovery, events_v1, openapi, scale};
use crate::MemoryCluster;
use crate::api::{Change, Subresource};
use crate::crds;
use crate::managed_fields::{Manager, Operation};
use crate::selector::Selector;
use crate::store::ObjectKey;
use cubepod_kube::{ApiErrorKind, Cluster, PageRequest, Resource, Scope};

pub(super) const MERGE_PATCH: &str = "application/merge-patch+json";
pub(super) const STRATEGIC_MERGE_PATCH: &str = "application/strategic-merge-patch+json";
pub(super) const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// What every connection of one server shares.
pub(crate) struct Shared {
    pub(crate) cluster: Arc<MemoryCluster>,
    pub(crate) token: RwLock<Option<String>>,
    pub(crate) crds_installed: AtomicBool,
    pub(crate) layer: Option<Arc<dyn Layer>>,
    /// A watch's length when the client names no `timeoutSeconds`.
    pub(crate) watch_timeout: Duration,
    pub(crate) bookmark_interval: Option<Duration>,
    /// Every list answered whole, whatever its `limit` ([`super::ServeOptions::ignore_limit`]).
    pub(crate) ignore_limit: bool,
}

/// The service error that makes hyper drop the connection (HTTP/2: reset the stream) without
/// a response, for [`Verdict::Reset`].
#[derive(Debug, thiserror::Error)]
#[error("connection reset by the server's layer")]
pub(crate) struct ConnectionReset;

/// What the request asked for besides its route and query.
struct Ask {
    method: Method,
    /// A Table instead of the objects (`Accept: ...;as=Table;g=meta.k8s.io;v=v1`).
    table: bool,
    accept: String,
    content_type: String,
    user_agent: String,
    /// The request is to events.k8s.io/v1 (its Events converted from and to core/v1's).
    events_v1: bool,
}

impl Ask {
    /// How the objects of a GET (one, a list's or a watch's) and a write's answer are sent: a
    /// Table first, else their metadata alone (`PartialObjectMetadata`, `...List` for a
    /// `list`), else whole.
    fn render(&self, include: IncludeObject, list: bool) -> Render {
        Render {
            table: self.table.then_some(include),
            metadata: !self.table && partial::wanted(&self.accept, list),
            events_v1: self.events_v1,
        }
    }
}

pub(crate) async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Body>, ConnectionReset> {
    let (mut parts, body) = request.into_parts();
    if let Some(layer) = &shared.layer {
        layer.rewrite(&mut parts);
    }
    let path = parts.uri.path().to_owned();
    let route = routes::parse(&path, shared.crds_installed.load(Ordering::Relaxed));
    let query = Query::parse(parts.uri.query().unwrap_or_default());
    let resource = route.as_ref().and_then(Route::resource);
    let watch = parts.method == Method::GET
        && matches!(route, Some(Route::Collection { .. }))
        && query.as_ref().is_ok_and(|q| q.watch);
    let info = RequestInfo {
        method: parts.method.clone(),
        version: parts.version,
        path,
        resource,
        watch,
    };
    let verdict = match &shared.layer {
        Some(layer) => layer.decide(&info).await,
        None => Verdict::Proceed {
            end_watch_after: None,
        },
    };
    let response = match verdict {
        Verdict::Reset => None,
        Verdict::Respond {
            code,
            reason,
            retry_after,
        } => {
            let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut failure = Failure::new(code, reason, "injected fault");
            failure.retry_after = retry_after;
            Some(failure.into_response())
        }
        Verdict::Proceed { end_watch_after } => {
            let answer = match authorize(&shared, &parts.headers) {
                Ok(()) => serve(&shared, &parts, body, route, query, end_watch_after).await,
                Err(failure) => Err(failure),
            };
            Some(answer.unwrap_or_else(Failure::into_response))
        }
    };
    if let Some(layer) = &shared.layer {
        layer.record(info, response.as_ref().map(|r| r.status().as_u16()));
    }
    response.ok_or(ConnectionReset)
}

/// With a token configured, only `Authorization: Bearer <token>` gets in.
fn authorize(shared: &Shared, headers: &HeaderMap) -> Result<(), Failure> {
    let expected = shared.token.read().unwrap_or_else(PoisonError::into_inner);
    let Some(expected) = expected.as_deref() else {
        return Ok(());
    };
    let given = headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    if given == Some(expected) {
        Ok(())
    } else {
        Err(Failure::unauthorized())
    }
}

fn header(headers: &HeaderMap, name: hyper::header::HeaderName) -> String {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

async fn serve(
    shared: &Shared,
    parts: &Parts,
    body: Incoming,
    route: Option<Route>,
    query: Result<Query, routes::QueryError>,
    end_watch_after: Option<u32>,
) -> Result<Response<Body>, Failure> {
    let route = route.ok_or_else(Failure::no_route)?;
    if let Route::Review(review) = route {
        return super::reviews::serve(&shared.cluster, review, &parts.method, body).await;
    }
    let accept = header(&parts.headers, ACCEPT);
    let ask = Ask {
        method: parts.method.clone(),
        table: table::wanted(&accept),
        accept,
        content_type: header(&parts.headers, CONTENT_TYPE),
        user_agent: header(&parts.headers, USER_AGENT),
        events_v1: events_v1::is_path(parts.uri.path()),
    };
    let method = &ask.method;
    let crds = shared.crds_installed.load(Ordering::Relaxed);
    if *method == Method::GET
        && matches!(route, Route::CoreVersions | Route::Groups)
        && discovery::aggregated_wanted(&header(&parts.headers, ACCEPT))
    {
        let document = discovery::aggregated(route == Route::CoreVersions, crds);
        let mut response = body::json(StatusCode::OK, &document);
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static(discovery::AGGREGATED),
        );
        return Ok(response);
    }
    let document = match (&route, method) {
        (Route::Version, &Method::GET) => Some(discovery::version()),
        (Route::CoreVersions, &Method::GET) => Some(discovery::core_versions()),
        (Route::Groups, &Method::GET) => Some(discovery::groups(crds)),
        (Route::Resources { group_version }, &Method::GET) => {
            Some(discovery::resources(group_version))
        }
        (Route::OpenApiIndex, &Method::GET) => Some(openapi::index(crds)),
        (Route::OpenApi { group_version }, &Method::GET) => Some(openapi::document(group_version)),
        _ => None,
    };
    if let Some(document) = document {
        return Ok(body::json(StatusCode::OK, &document));
    }
    let query = query.map_err(|error| Failure::bad_request(error.to_string()))?;
    if query.dry_run && *method != Method::GET {
        return Err(Failure::bad_request(
            "dryRun is not supported by the embedded cluster: nothing was written",
        ));
    }
    let fields = FieldSelector::parse(query.field_selector.as_deref().unwrap_or_default())
        .map_err(|error| Failure::bad_request(error.to_string()))?;
    let cluster = &shared.cluster;
    match route {
        Route::Collection {
            resource,
            namespace,
        } => {
            let scope = Scope {
                resource,
                namespace,
                label_selector: query.label_selector.clone().filter(|s| !s.is_empty()),
            };
            match *method {
                Method::GET if query.watch => {
                    let plan = WatchPlan {
                        resource,
                        timeout: query
                            .timeout
                            .filter(|t| !t.is_zero())
                            .unwrap_or(shared.watch_timeout),
                        bookmarks: query.allow_watch_bookmarks,
                        bookmark_interval: shared.bookmark_interval,
                        end_after: end_watch_after,
                        render: ask.render(query.include_object, false),
                        fields,
                    };
                    watch(cluster, &scope, query.resource_version.as_deref(), plan).await
                }
                Method::GET => {
                    let limit = query.limit.filter(|_| !shared.ignore_limit);
                    let page = limit.map(|limit| PageRequest {
                        limit,
                        continue_token: query.continue_token.clone(),
                    });
                    let render = ask.render(query.include_object, true);
                    list(cluster, &scope, page.as_ref(), &fields, render).await
                }
                Method::POST if !scope.namespace.is_empty() => {
                    let mut object = read_object(body).await?;
                    let warnings =
                        validate(resource, &ask, &mut object, query.field_validation, false)?;
                    let render = ask.render(query.include_object, false);
                    let manager = manager(&query, &ask, Operation::Update, false);
                    let response = create(
                        cluster,
                        resource,
                        &scope.namespace,
                        object,
                        &manager,
                        render,
                    )?;
                    Ok(with_warnings(response, &warnings))
                }
                _ => Err(Failure::method_not_allowed(method)),
            }
        }
        Route::Object {
            resource,
            namespace,
            name,
            status,
        } => {
            let api = |error| Failure::from_api(&error, resource, Some(&name));
            // A get's object and a write's answer alike, as the API server renders them.
            let render = ask.render(query.include_object, false);
            match *method {
                Method::GET => {
                    let object = cluster
                        .get(resource, &namespace, &name)
                        .await
                        .map_err(api)?;
                    Ok(body::json(
                        StatusCode::OK,
                        &render.object(resource, &object),
                    ))
                }
                Method::PATCH | Method::PUT => {
                    let kind = if *method == Method::PUT {
                        Write::Replace
                    } else {
                        patch_kind(resource, &ask.content_type)?
                    };
                    let mut body = match kind {
                        Write::Apply => read_yaml_object(body).await?,
                        _ => read_object(body).await?,
                    };
                    let warnings = validate(
                        resource,
                        &ask,
                        &mut body,
                        query.field_validation,
                        kind == Write::Strategic,
                    )?;
                    let operation = match kind {
                        Write::Apply => Operation::Apply,
                        _ => Operation::Update,
                    };
                    if operation == Operation::Apply && query.field_manager.is_none() {
                        return Err(field_manager_required());
                    }
                    let manager = manager(&query, &ask, operation, status);
                    let change = match kind {
                        Write::Merge => Change::Merge(&body),
                        Write::Strategic => Change::Strategic(&body),
                        Write::Replace => Change::Replace(&body),
                        Write::Apply => Change::Apply {
                            config: &body,
                            force: query.force,
                        },
                    };
                    let subresource = if status {
                        Subresource::Status
                    } else {
                        Subresource::Main
                    };
                    let existed = kind != Write::Apply
                        || cluster.get(resource, &namespace, &name).await.is_ok();
                    let key = ObjectKey::new(resource, &namespace, &name);
                    let written = cluster
                        .write_by(key, change, subresource, &manager)
                        .map_err(|error| write_failure(&error, resource, &name))?;
                    // An apply that creates answers as a create does.
                    let code = if existed {
                        StatusCode::OK
                    } else {
                        StatusCode::CREATED
                    };
                    let response = body::json(code, &render.object(resource, &written));
                    Ok(with_warnings(response, &warnings))
                }
                Method::DELETE if !status => {
                    let options = read_json(body).await?;
                    delete(
                        cluster,
                        resource,
                        &namespace,
                        &name,
                        options.as_ref(),
                        render,
                    )
                    .await
                }
                _ => Err(Failure::method_not_allowed(method)),
            }
        }
        Route::Scale {
            resource,
            namespace,
            name,
        } => {
            let api = |error| Failure::from_api(&error, resource, Some(&name));
            let current = cluster
                .get(resource, &namespace, &name)
                .await
                .map_err(api)?;
            match *method {
                Method::GET if ask.table => Ok(body::json(
                    StatusCode::OK,
                    &scale::table(&scale::of(&current)),
                )),
                Method::GET => Ok(body::json(StatusCode::OK, &scale::of(&current))),
                Method::PUT | Method::PATCH => {
                    if *method == Method::PATCH {
                        check_merge_patch(&ask.content_type)?;
                    }
                    let request = read_object(body).await?;
                    let patch = scale::pool_patch(method, &scale::of(&current), &request)?;
                    let patched = cluster
                        .patch(resource, &namespace, &name, patch)
                        .await
                        .map_err(api)?;
                    Ok(body::json(StatusCode::OK, &scale::of(&patched)))
                }
                _ => Err(Failure::method_not_allowed(method)),
            }
        }
        Route::Namespaces => match *method {
            Method::GET if query.watch => Err(Failure::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "namespaces are not watched here: the cluster's namespaces never change",
            )),
            Method::GET => namespace_list(
                cluster,
                &query,
                &fields,
                ask.render(query.include_object, true),
            ),
            _ => Err(Failure::method_not_allowed(method)),
        },
        Route::Namespace { name } => match *method {
            Method::GET => {
                let namespace = cluster.namespace(&name).map_err(|error| {
                    Failure::new(StatusCode::NOT_FOUND, "NotFound", error.message)
                })?;
                let render = ask.render(query.include_object, false);
                let document = match render.table {
                    Some(include) => table::namespaces(&[&namespace], "1", include),
                    None if render.metadata => partial::object(&namespace),
                    None => namespace,
                };
                Ok(body::json(StatusCode::OK, &document))
            }
            _ => Err(Failure::method_not_allowed(method)),
        },
        // A discovery path with a verb other than GET.
        _ => Err(Failure::method_not_allowed(method)),
    }
}

/// `GET /api/v1/namespaces`: the cluster's namespaces, as the request's `Accept` asks.
fn namespace_list(
    cluster: &MemoryCluster,
    query: &Query,
    fields: &FieldSelector,
    render: Render,
) -> Result<Response<Body>, Failure> {
    let labels = Selector::parse(query.label_selector.as_deref().unwrap_or_default())
        .map_err(|error| Failure::bad_request(error.to_string()))?;
    let items: Vec<Value> = cluster
        .namespaces()
        .into_iter()
        .filter(|namespace| labels.matches(namespace) && fields.matches(namespace))
        .collect();
    let version = cluster.resource_version();
    if let Some(include) = render.table {
        let rows: Vec<&Value> = items.iter().collect();
        return Ok(body::json(
            StatusCode::OK,
            &table::namespaces(&rows, &version, include),
        ));
    }
    let metadata = json!({ "resourceVersion": version });
    let document = if render.metadata {
        partial::list(&items, metadata)
    } else {
        json!({"kind": "NamespaceList", "apiVersion": "v1", "metadata": metadata, "items": items})
    };
    Ok(body::json(StatusCode::OK, &document))
}

/// Unknown fields against the kind's schema (the CRD's, or the Kubernetes API's for a built-in
/// kind): pruned, as the API server prunes a custom resource and a built-in kind's decoding
/// drops them, and then per `fieldValidation` the warnings to send, or the refusal. An
/// events.k8s.io/v1 Event is checked against its own schema, then stored as core/v1's.
fn validate(
    resource: Resource,
    ask: &Ask,
    object: &mut Value,
    validation: FieldValidation,
    directives: bool,
) -> Result<Vec<String>, Failure> {
    let group_version = if ask.events_v1 {
        events_v1::GROUP_VERSION
    } else {
        resource.api_version()
    };
    let pruned = match (
        crds::of(resource),
        openapi::kind_schema(group_version, resource.kind()),
    ) {
        (Some(crd), _) => crds::prune(&crd.schema, object),
        (None, Some((schema, definitions))) => {
            crds::prune_with(schema, definitions, object, directives)
        }
        (None, None) => Vec::new(),
    };
    if ask.events_v1 {
        events_v1::to_core(object);
    }
    if validation == FieldValidation::Ignore {
        return Ok(Vec::new());
    }
    let unknown: Vec<String> = pruned
        .into_iter()
        .map(|field| format!("unknown field \"{field}\""))
        .collect();
    if validation == FieldValidation::Strict && !unknown.is_empty() {
        // As the API server's decoder words it for a custom resource.
        let kind = resource.kind();
        let version = group_version.rsplit('/').next().unwrap_or_default();
        let mut failure = Failure::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding \
             error: {}",
            unknown.join(", ")
        ));
        failure.target = Some((resource, String::new()));
        return Err(failure);
    }
    Ok(unknown)
}

/// The API server's `Warning: 299 - "..."` headers.
fn with_warnings(mut response: Response<Body>, warnings: &[String]) -> Response<Body> {
    for warning in warnings {
        let text = format!("299 - \"{}\"", warning.replace('"', "\\\""));
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(WARNING, value);
        }
    }
    response
}

async fn list(
    cluster: &MemoryCluster,
    scope: &Scope,
    page: Option<&PageRequest>,
    fields: &FieldSelector,
    render: Render,
) -> Result<Response<Body>, Failure> {
    let resource = scope.resource;
    let mut list = match page {
        Some(page) => cluster.list_page(scope, page).await,
        None => cluster.list(scope).await,
    }
    .map_err(|error| Failure::from_api(&error, resource, None))?;
    // After paging, as the API server filters a page: a page may come out short.
    if !fields.is_everything() {
        list.items.retain(|item| fields.matches(item));
    }
    if let Some(include) = render.table {
        let rows: Vec<&Value> = list.items.iter().collect();
        let mut document = table::render(resource, &rows, &list.resource_version, include);
        if let Some(token) = &list.continue_token {
            document["metadata"]["continue"] = json!(token);
        }
        return Ok(body::json(StatusCode::OK, &document));
    }
    let mut metadata = json!({ "resourceVersion": list.resource_version });
    if let Some(token) = &list.continue_token {
        metadata["continue"] = json!(token);
    }
    let document = if render.metadata {
        partial::list(&list.items, metadata)
    } else if render.events_v1 {
        let items: Vec<Value> = list.items.iter().map(events_v1::from_core).collect();
        json!({
            "kind": "EventList",
            "apiVersion": events_v1::GROUP_VERSION,
            "metadata": metadata,
            "items": items,
        })
    } else {
        json!({
            "kind": format!("{}List", resource.kind()),
            "apiVersion": resource.api_version(),
            "metadata": metadata,
            "items": list.items,
        })
    };
    Ok(body::json(StatusCode::OK, &document))
}

/// A watch from `resource_version`; without one (or from `"0"`) the stream starts with an
/// ADDED event for each object, as the API server's does.
async fn watch(
    cluster: &Arc<MemoryCluster>,
    scope: &Scope,
    resource_version: Option<&str>,
    plan: WatchPlan,
) -> Result<Response<Body>, Failure> {
    let api = |error| Failure::from_api(&error, scope.resource, None);
    let (initial, from) = match resource_version.unwrap_or_default() {
        "" | "0" => {
            let list = cluster.list(scope).await.map_err(api)?;
            (list.items, list.resource_version)
        }
        version if version.parse::<u64>().is_ok() => (Vec::new(), version.to_owned()),
        version => {
            return Err(Failure::bad_request(format!(
                "invalid resourceVersion: {version:?}"
            )));
        }
    };
    let events = cluster.watch(scope, &from).await.map_err(api)?;
    let stream = WatchBody::new(Arc::clone(cluster), plan, initial, events);
    let mut response = Response::new(stream.boxed_unsync());
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

/// Creates, and answers with the object as the request's `Accept` asks (whole, its metadata or
/// its Table row), as the API server renders every write's answer.
fn create(
    cluster: &MemoryCluster,
    resource: Resource,
    namespace: &str,
    mut object: Value,
    manager: &Manager,
    render: Render,
) -> Result<Response<Body>, Failure> {
    generate_name(&mut object);
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let created = cluster
        .create_by(resource, namespace, object, manager)
        .map_err(|error| Failure::from_api(&error, resource, name.as_deref()))?;
    Ok(body::json(
        StatusCode::CREATED,
        &render.object(resource, &created),
    ))
}

/// `metadata.generateName` without a name: the prefix and five random characters.
fn generate_name(object: &mut Value) {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let has_name = metadata
        .get("name")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let prefix = metadata.get("generateName").and_then(Value::as_str);
    if let (false, Some(prefix)) = (has_name, prefix) {
        let suffix: String = rand::rng()
            .sample_iter(Alphanumeric)
            .take(5)
            .map(|c| char::from(c).to_ascii_lowercase())
            .collect();
        let name = format!("{prefix}{suffix}");
        metadata.insert("name".into(), name.into());
    }
}

/// Deletes, honouring DeleteOptions' `preconditions`. Answers with the object while it is
/// still there (finalizers, a pod's grace period), rendered as `Accept` asks, and with the
/// deleted object for the kinds whose API server storage returns it (Pods, PVCs, Services:
/// the official clients read their delete's answer as that kind); else with a Success Status
/// (never rendered, as the API server leaves a Status as it is).
async fn delete(
    cluster: &MemoryCluster,
    resource: Resource,
    namespace: &str,
    name: &str,
    options: Option<&Value>,
    render: Render,
) -> Result<Response<Body>, Failure> {
    let api = |error| Failure::from_api(&error, resource, Some(name));
    let current = cluster.get(resource, namespace, name).await.map_err(api)?;
    for field in ["uid", "resourceVersion"] {
        let wanted = options
            .and_then(|o| o.pointer(&format!("/preconditions/{field}")))
            .and_then(Value::as_str);
        let actual = current
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        if let Some(wanted) = wanted.filter(|w| *w != actual) {
            let message = format!(
                "Precondition failed: {field} in precondition: {wanted}, {field} in object meta: {actual}"
            );
            let mut failure = Failure::new(StatusCode::CONFLICT, "Conflict", message);
            failure.target = Some((resource, name.to_owned()));
            return Err(failure);
        }
    }
    cluster
        .delete(resource, namespace, name)
        .await
        .map_err(api)?;
    match cluster.get(resource, namespace, name).await {
        Ok(remaining) => Ok(body::json(
            StatusCode::OK,
            &render.object(resource, &remaining),
        )),
        Err(error) if error.is(ApiErrorKind::NotFound) && returns_deleted_object(resource) => Ok(
            body::json(StatusCode::OK, &render.object(resource, &current)),
        ),
        Err(error) if error.is(ApiErrorKind::NotFound) => {
            let uid = current.pointer("/metadata/uid").and_then(Value::as_str);
            let success = status::success(resource, name, uid);
            Ok(body::json(StatusCode::OK, &success))
        }
        Err(error) => Err(api(error)),
    }
}

/// The kinds whose kube-apiserver storage answers a delete with the deleted object
/// (`ReturnDeletedObject`), not a Status.
fn returns_deleted_object(resource: Resource) -> bool {
    resource.descriptor().delete_returns_object
}

/// Which write a PATCH or PUT is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Write {
    Merge,
    Strategic,
    Replace,
    Apply,
}

/// The patch a PATCH's `Content-Type` names: a JSON merge patch, a server-side apply, or (for
/// the built-in kinds, as the API server has no merge keys for a custom resource) a strategic
/// merge patch. JSON patch is not implemented, and said so.
fn patch_kind(resource: Resource, content_type: &str) -> Result<Write, Failure> {
    let media_type = content_type
        .split(';')
        .next()
        .map(str::trim)
        .unwrap_or_default()
        .to_ascii_lowercase();
    let custom = crds::of(resource).is_some();
    match media_type.as_str() {
        MERGE_PATCH => return Ok(Write::Merge),
        APPLY_PATCH => return Ok(Write::Apply),
        STRATEGIC_MERGE_PATCH if !custom => return Ok(Write::Strategic),
        _ => {}
    }
    let accepted = if custom {
        format!("{MERGE_PATCH}, {APPLY_PATCH}")
    } else {
        format!("{STRATEGIC_MERGE_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}")
    };
    Err(Failure::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format - accepted media types include: \
             {accepted}"
        ),
    ))
}

/// PATCH of a `/scale` takes a JSON merge patch.
fn check_merge_patch(content_type: &str) -> Result<(), Failure> {
    let media_type = content_type
        .split(';')
        .next()
        .map(str::trim)
        .unwrap_or_default();
    if media_type.eq_ignore_ascii_case(MERGE_PATCH) {
        return Ok(());
    }
    Err(Failure::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format - accepted media types include: \
             {MERGE_PATCH} (got {media_type:?})"
        ),
    ))
}

/// Who a write's fields are recorded for: the `fieldManager` the request names, else, as the
/// API server does, its User-Agent up to the first `/` (`kubectl` for
/// `kubectl/v1.32.0 (linux/amd64)`).
fn manager(query: &Query, ask: &Ask, operation: Operation, status: bool) -> Manager {
    let name = query.field_manager.clone().unwrap_or_else(|| {
        let agent = ask.user_agent.split('/').next().unwrap_or_default();
        agent.chars().take(128).collect()
    });
    Manager {
        name,
        operation,
        subresource: status.then_some("status"),
    }
}

/// The API server's refusal of an apply that names no manager.
fn field_manager_required() -> Failure {
    let mut failure = Failure::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required \
         for apply patch",
    );
    failure.causes = vec![cubepod_kube::StatusCause {
        reason: "FieldValueRequired".into(),
        message: "Required value: is required for apply patch".into(),
        field: "fieldManager".into(),
    }]
    .into_boxed_slice();
    failure
}

/// A write's error as a Status; an apply's conflicts name no object in `details`, as the API
/// server's do not.
fn write_failure(error: &cubepod_kube::ApiError, resource: Resource, name: &str) -> Failure {
    let mut failure = Failure::from_api(error, resource, Some(name));
    if error
        .causes
        .iter()
        .any(|cause| cause.reason == "FieldManagerConflict")
    {
        failure.target = None;
    }
    failure
}

//! Which sandbox a request is for: its host name `<port>-<sandbox>.<namespace>.<domain>`, or,
//! for clients that cannot set the host, the headers `X-Sandbox-Name`, `X-Sandbox-Namespace`
//! and `X-Sandbox-Port` (agent-sandbox's names). The headers win when `X-Sandbox-Name` is
//! present; a request naming no sandbox, or naming one badly, is refused with the reason.

use hyper::HeaderMap;

/// The header naming the sandbox.
pub(crate) const NAME_HEADER: &str = "x-sandbox-name";
/// The header naming its namespace.
pub(crate) const NAMESPACE_HEADER: &str = "x-sandbox-namespace";
/// The header naming the port of its Pod.
pub(crate) const PORT_HEADER: &str = "x-sandbox-port";

/// A sandbox and the port of its Pod a request is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) port: u16,
}

/// Why a request names no sandbox: the 400's message.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TargetError {
    #[error(
        "no sandbox named: the host \"{host}\" is not <port>-<sandbox>.<namespace>.{domain} and \
         there is no X-Sandbox-Name header"
    )]
    NotRouted { host: String, domain: String },
    #[error(
        "the {what} \"{value}\" is not a DNS-1123 label (lower case letters, digits and '-', at most 63)"
    )]
    BadName { what: &'static str, value: String },
    #[error("the port \"{0}\" is not a number from 1 to 65535")]
    BadPort(String),
    #[error(
        "{0} is missing: a request routed by headers sends all three of X-Sandbox-Name, \
         X-Sandbox-Namespace and X-Sandbox-Port"
    )]
    MissingHeader(&'static str),
    #[error("the {0} header is not readable text")]
    Unreadable(&'static str),
}

/// The request's target, from its headers when `X-Sandbox-Name` is there, else from its host
/// (`authority`, HTTP/2's `:authority`, when the request line has one).
pub(crate) fn target(
    headers: &HeaderMap,
    authority: Option<&str>,
    domain: &str,
) -> Result<Target, TargetError> {
    let header = |name: &'static str| -> Result<Option<&str>, TargetError> {
        match headers.get(name) {
            None => Ok(None),
            Some(value) => value
                .to_str()
                .map(|v| Some(v.trim()))
                .map_err(|_| TargetError::Unreadable(name)),
        }
    };
    if let Some(name) = header(NAME_HEADER)? {
        let namespace =
            header(NAMESPACE_HEADER)?.ok_or(TargetError::MissingHeader("X-Sandbox-Namespace"))?;
        let port = header(PORT_HEADER)?.ok_or(TargetError::MissingHeader("X-Sandbox-Port"))?;
        return Ok(Target {
            namespace: label("namespace", namespace)?,
            name: label("sandbox name", name)?,
            port: port_number(port)?,
        });
    }
    // Half a header route is a mistake, not a request for the host's sandbox.
    if header(NAMESPACE_HEADER)?.is_some() || header(PORT_HEADER)?.is_some() {
        return Err(TargetError::MissingHeader("X-Sandbox-Name"));
    }
    let host = match authority {
        Some(authority) => authority,
        None => header("host")?.unwrap_or_default(),
    };
    let not_routed = || TargetError::NotRouted {
        host: host.to_owned(),
        domain: domain.to_owned(),
    };
    // The host without its port, if any; a bracketed IPv6 literal is never a sandbox's.
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let suffix = format!(".{}", domain.trim_matches('.'));
    let Some(rest) = name.strip_suffix(&suffix) else {
        return Err(not_routed());
    };
    let Some((first, namespace)) = rest.split_once('.') else {
        return Err(not_routed());
    };
    let Some((port, sandbox)) = first.split_once('-') else {
        return Err(not_routed());
    };
    Ok(Target {
        namespace: label("namespace", namespace)?,
        name: label("sandbox name", sandbox)?,
        port: port_number(port)?,
    })
}

/// `value` if it is a DNS-1123 label, as namespaces and (here) sandbox names must be.
fn label(what: &'static str, value: &str) -> Result<String, TargetError> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if ok {
        Ok(value.to_owned())
    } else {
        Err(TargetError::BadName {
            what,
            value: value.to_owned(),
        })
    }
}

fn port_number(value: &str) -> Result<u16, TargetError> {
    match value.parse::<u16>() {
        Ok(port) if port > 0 && value.bytes().all(|b| b.is_ascii_digit()) => Ok(port),
        _ => Err(TargetError::BadPort(value.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn with(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    fn sandbox(namespace: &str, name: &str, port: u16) -> Target {
        Target {
            namespace: namespace.into(),
            name: name.into(),
            port,
        }
    }

    #[test]
    fn a_host_name_names_port_sandbox_and_namespace() {
        let headers = with(&[("host", "8080-my-box.team-a.sandboxes.localhost:9000")]);
        assert_eq!(
            target(&headers, None, "sandboxes.localhost"),
            Ok(sandbox("team-a", "my-box", 8080))
        );
        assert_eq!(
            target(
                &HeaderMap::new(),
                Some("80-b.ns.example.com"),
                "example.com"
            ),
            Ok(sandbox("ns", "b", 80))
        );
    }

    #[test]
    fn headers_win_over_the_host() {
        let headers = with(&[
            ("host", "8080-a.ns.example.com"),
            (NAME_HEADER, "b"),
            (NAMESPACE_HEADER, "other"),
            (PORT_HEADER, "3000"),
        ]);
        assert_eq!(
            target(&headers, None, "example.com"),
            Ok(sandbox("other", "b", 3000))
        );
    }

    #[test]
    fn malformed_names_ports_and_hosts_are_refused_with_the_reason() {
        let host = |h: &str| target(&with(&[("host", h)]), None, "example.com");
        assert!(matches!(
            host("example.com"),
            Err(TargetError::NotRouted { .. })
        ));
        assert!(matches!(
            host("8080-a.example.org"),
            Err(TargetError::NotRouted { .. })
        ));
        assert!(matches!(
            host("a.ns.example.com"),
            Err(TargetError::NotRouted { .. })
        ));
        assert_eq!(
            host("0-a.ns.example.com"),
            Err(TargetError::BadPort("0".into()))
        );
        assert_eq!(
            host("99999-a.ns.example.com"),
            Err(TargetError::BadPort("99999".into()))
        );
        assert!(matches!(
            host("80-a_b.ns.example.com"),
            Err(TargetError::BadName { .. })
        ));
        assert!(matches!(
            host("80-a.n.s.example.com"),
            Err(TargetError::BadName { .. })
        ));
        let missing = target(&with(&[(NAME_HEADER, "a")]), None, "example.com");
        assert_eq!(
            missing,
            Err(TargetError::MissingHeader("X-Sandbox-Namespace"))
        );
        let bad = with(&[
            (NAME_HEADER, "A"),
            (NAMESPACE_HEADER, "ns"),
            (PORT_HEADER, "1"),
        ]);
        assert!(matches!(
            target(&bad, None, "example.com"),
            Err(TargetError::BadName { .. })
        ));
        let port = with(&[
            (NAME_HEADER, "a"),
            (NAMESPACE_HEADER, "ns"),
            (PORT_HEADER, "+1"),
        ]);
        assert_eq!(
            target(&port, None, "example.com"),
            Err(TargetError::BadPort("+1".into()))
        );
        let half = with(&[
            ("host", "8080-a.ns.example.com"),
            (NAMESPACE_HEADER, "ns"),
            (PORT_HEADER, "80"),
        ]);
        assert_eq!(
            target(&half, None, "example.com"),
            Err(TargetError::MissingHeader("X-Sandbox-Name"))
        );
        let message = target(
            &with(&[("host", "8080-a.ns.example.com:x")]),
            None,
            "example.com",
        )
        .unwrap_err()
        .to_string();
        assert!(
            message.contains("<port>-<sandbox>.<namespace>.example.com"),
            "{message}"
        );
    }
}

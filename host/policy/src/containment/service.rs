//! A sandbox's Service (rule `service`): headless (`clusterIP: None`, type ClusterIP),
//! selecting exactly the sandbox's own Pod, with ports only of `spec.service.ports`. No
//! external IPs, no ExternalName, no NodePort or LoadBalancer: nothing that would publish the
//! sandbox beyond the cluster's DNS name, which its NetworkPolicy still guards.

use std::fmt;

use super::json::Json;
use super::network::protocol_name;
use super::{Fields, Refusal, Rule, SANDBOX_LABEL, SandboxScope, nth, short, sub};

pub(super) fn check(
    scope: &SandboxScope,
    what: &dyn fmt::Display,
    object: &Json<'_>,
) -> Result<(), Refusal> {
    let fields = Fields::new(Rule::Service, what);
    let allowed = scope
        .network
        .as_ref()
        .and_then(|n| n.service_ports.as_ref())
        .ok_or_else(|| {
            fields.refuse(
                "kind",
                format!(
                    "Sandbox {:?} has no spec.service: it may not have a Service",
                    scope.name
                ),
            )
        })?;
    fields.object(object, "", &["apiVersion", "kind", "metadata", "spec"])?;
    let spec = fields.required(object, "", "spec")?;
    let map = fields.object(
        spec,
        "spec",
        &[
            "clusterIP",
            "type",
            "selector",
            "ports",
            "publishNotReadyAddresses",
        ],
    )?;
    if map.get("clusterIP").and_then(Json::as_str) != Some("None") {
        return Err(fields.refuse(
            "spec.clusterIP",
            "must be \"None\": a sandbox's Service is headless",
        ));
    }
    if let Some(kind) = map.get("type")
        && kind.as_str() != Some("ClusterIP")
    {
        return Err(fields.refuse(
            "spec.type",
            format!(
                "{} is not ClusterIP, the only type a sandbox's Service may have",
                short(kind)
            ),
        ));
    }
    if let Some(flag) = map.get("publishNotReadyAddresses")
        && !flag.is_boolean()
    {
        return Err(fields.refuse("spec.publishNotReadyAddresses", "not a boolean"));
    }
    let selector = fields.object(
        fields.required(spec, "spec", "selector")?,
        "spec.selector",
        &[SANDBOX_LABEL],
    )?;
    if selector.get(SANDBOX_LABEL).and_then(Json::as_str) != Some(scope.name.as_str()) {
        return Err(fields.refuse(
            "spec.selector",
            format!(
                "must select exactly Sandbox {:?}'s own Pod ({SANDBOX_LABEL}: {:?})",
                scope.name, scope.name
            ),
        ));
    }
    let ports = fields.array(fields.required(spec, "spec", "ports")?, "spec.ports")?;
    for (i, port) in ports.iter().enumerate() {
        let at = nth(&"spec.ports", i);
        let entry = fields.object(port, at, &["name", "port", "protocol", "targetPort"])?;
        if let Some(name) = entry.get("name")
            && !name.is_string()
        {
            return Err(fields.refuse(sub(&at, "name"), "not a string"));
        }
        let number = entry.get("port").and_then(Json::as_u64);
        let protocol = match entry.get("protocol") {
            None => Some("TCP"),
            Some(p) => p.as_str(),
        };
        let listed = allowed.iter().any(|(p, proto)| {
            Some(u64::from(*p)) == number && Some(protocol_name(*proto)) == protocol
        });
        if !listed {
            return Err(fields.refuse(
                at,
                "not a port (number and protocol) of the Sandbox's spec.service.ports",
            ));
        }
        // The Pod's own port of the same number: another would reach past what was listed.
        if let Some(target) = entry.get("targetPort")
            && target.as_u64() != number
        {
            return Err(fields.refuse(
                sub(&at, "targetPort"),
                "must be the port itself (or absent)",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::containment::tests::*;
    use crate::containment::*;
    use cubepod_policy_sdk::bindings::ReconcileInput;

    #[track_caller]
    fn service_refused(input: &ReconcileInput, edit: impl FnOnce(&mut Value), field: &str) {
        let mut manifest = written(input, Resource::Service);
        edit(&mut manifest);
        let scope = scope_of(input);
        refused(
            check_in(
                &Containment::default(),
                &scope,
                Resource::Service,
                S,
                &manifest,
            ),
            Rule::Service,
            field,
        );
    }

    #[test]
    fn a_service_is_the_sandboxs_own_headless_one_on_its_ports() {
        let input = with(served);
        service_refused(
            &input,
            |m| m["spec"]["selector"]["cubepod.io/sandbox"] = json!("bob"),
            "spec.selector",
        );
        service_refused(
            &input,
            |m| m["spec"]["selector"]["app"] = json!("x"),
            "spec.selector.app",
        );
        service_refused(
            &input,
            |m| m["spec"]["clusterIP"] = json!("10.96.0.9"),
            "spec.clusterIP",
        );
        service_refused(
            &input,
            |m| m["spec"]["type"] = json!("NodePort"),
            "spec.type",
        );
        service_refused(
            &input,
            |m| m["spec"]["externalIPs"] = json!(["1.2.3.4"]),
            "spec.externalIPs",
        );
        service_refused(
            &input,
            |m| m["spec"]["externalName"] = json!("evil.example"),
            "spec.externalName",
        );
        service_refused(
            &input,
            |m| m["spec"]["ports"][0]["port"] = json!(22),
            "spec.ports[0]",
        );
        service_refused(
            &input,
            |m| m["spec"]["ports"][0]["targetPort"] = json!(22),
            "spec.ports[0].targetPort",
        );
        // A sandbox without spec.service has none.
        let plain = with(|_| {});
        let manifest = written(&input, Resource::Service);
        refused(
            check_in(
                &Containment::default(),
                &scope_of(&plain),
                Resource::Service,
                S,
                &manifest,
            ),
            Rule::Service,
            "kind",
        );
    }
}

// A Sandbox being deleted: delete its children, the NetworkPolicy last (after the Pod is gone).
import * as names from "./names.js";
import * as status from "./status.js";

export function cleanup(client, now, sandbox, observed) {
  const namespace = sandbox.namespace;
  const pod = observed.pod;
  if (pod != null && !pod.deleting) client.deletePod(namespace, pod.name);
  for (const pvc of observed.pvcs) {
    if (!pvc.deleting) client.deletePvc(namespace, pvc.name);
  }
  if (observed.secret) client.deleteSecret(namespace, names.secret(sandbox.name));
  if (observed.service != null && !observed.service.deleting) {
    client.deleteService(namespace, names.service(sandbox.name));
  }
  if (pod == null && observed.networkPolicy != null && !observed.networkPolicy.deleting) {
    client.deleteNetworkPolicy(namespace, names.networkPolicy(sandbox.name));
  }
  const s = status.copyStatus(sandbox.status);
  s.phase = "terminating";
  s.podIp = undefined;
  s.serviceFqdn = undefined;
  status.setCondition(
    s.conditions,
    status.READY,
    "false",
    "Deleting",
    "deleting the Pod, both volumes, the credentials, the Service and the NetworkPolicy",
    now,
  );
  const done =
    pod == null &&
    observed.pvcs.length === 0 &&
    !observed.secret &&
    observed.networkPolicy == null &&
    observed.service == null;
  return { done, status: s };
}

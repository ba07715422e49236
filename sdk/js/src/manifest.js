// The manifests the default policy writes, as Kubernetes JSON, byte for byte what the Rust SDK
// writes (sdk/src/manifest/): keys in the same order, maps sorted, the same fields left out.
import { toJson, digest, sortedMap, compareStrings } from "./json.js";
import { Cidr, NAT64_LOCAL, excepts } from "./cidr.js";
import * as names from "./names.js";

export { digest };

const ROOTFS_DEVICE = "/dev/cubepod/rootfs";
const WORKSPACE_DEVICE = "/dev/cubepod/workspace";
/** The Secret's key of the sandbox's credential. */
export const TOKEN_KEY = "token";

// Formats the rootfs volume from the image's filesystem once per generation; a restart of the
// Pod finds it formatted and leaves it as it is.
const PREPARE_ROOTFS = `set -eu
if blkid "$CUBEPOD_ROOTFS_DEVICE" >/dev/null 2>&1; then
  echo "rootfs generation $CUBEPOD_ROOTFS_GENERATION already prepared"
  exit 0
fi
mkfs.ext4 -q -L "cubepod-g$CUBEPOD_ROOTFS_GENERATION" -d /cubepod/rootfs "$CUBEPOD_ROOTFS_DEVICE"
echo "rootfs generation $CUBEPOD_ROOTFS_GENERATION prepared"`;

/**
 * Metadata of an object the controller manages, owned by `owner` ({kind, name, uid}).
 * `labels` and `annotations` are [key, value] pairs added to the defaults.
 */
function meta(name, namespace, owner, { child = true, labels = [], annotations = [] } = {}) {
  const allLabels = [[names.MANAGED_BY_LABEL, names.MANAGED_BY]];
  if (child) allLabels.push([names.SANDBOX_LABEL, owner.name]);
  allLabels.push(...labels);
  return {
    name,
    namespace,
    labels: sortedMap(allLabels),
    annotations: annotations.length > 0 ? sortedMap(annotations) : undefined,
    ownerReferences: [
      {
        apiVersion: names.API_VERSION,
        kind: owner.kind,
        name: owner.name,
        uid: owner.uid,
        controller: true,
        blockOwnerDeletion: true,
      },
    ],
  };
}

/** The owner of a sandbox's children. */
export const sandboxOwner = (sandbox) => ({ kind: "Sandbox", name: sandbox.name, uid: sandbox.uid });

/**
 * An object whose spec's digest rides along as the `cubepod.io/spec-hash` annotation: a
 * reconcile compares the digest with the cache's and renders the manifest only when they differ.
 */
export class Planned {
  constructor(kind, apiVersion, name, owner, spec) {
    this.kind = kind;
    this.apiVersion = apiVersion;
    this.name = name;
    this.owner = owner;
    this.specJson = toJson(spec);
    this.specHash = digest(this.specJson);
  }

  /** The whole object: `{manifest, specHash}`. */
  render(namespace) {
    const head = toJson({
      apiVersion: this.apiVersion,
      kind: this.kind,
      metadata: meta(this.name, namespace, this.owner, {
        annotations: [[names.SPEC_HASH_ANNOTATION, this.specHash]],
      }),
    });
    return { manifest: `${head.slice(0, -1)},"spec":${this.specJson}}`, specHash: this.specHash };
  }
}

/** A PVC of a sandbox; `role` is "rootfs" or "workspace", `cloneOf` a PVC to clone. */
export function pvc(name, namespace, owner, role, generation, size, storageClass, cloneOf) {
  const labels = [[names.VOLUME_LABEL, role]];
  if (generation != null) labels.push([names.GENERATION_LABEL, String(generation)]);
  return toJson({
    apiVersion: "v1",
    kind: "PersistentVolumeClaim",
    metadata: meta(name, namespace, owner, { labels }),
    spec: {
      accessModes: ["ReadWriteOnce"],
      volumeMode: "Block",
      resources: { requests: { storage: size } },
      storageClassName: storageClass ?? undefined,
      dataSource: cloneOf != null ? { kind: "PersistentVolumeClaim", name: cloneOf } : undefined,
    },
  });
}

/** The Secret holding the sandbox's credential. */
export function secret(name, namespace, owner, token) {
  return toJson({
    apiVersion: "v1",
    kind: "Secret",
    metadata: meta(name, namespace, owner),
    type: "Opaque",
    stringData: { [TOKEN_KEY]: token },
  });
}

const env = (name, value) => ({ name, value });
const rootfsDevice = () => ({ name: "rootfs", devicePath: ROOTFS_DEVICE });

function resources(spec) {
  const amounts = [];
  if (spec.cpu != null) amounts.push(["cpu", spec.cpu]);
  if (spec.memory != null) amounts.push(["memory", spec.memory]);
  if (amounts.length === 0) return undefined;
  return { requests: sortedMap(amounts), limits: sortedMap(amounts) };
}

/** The sandbox's Pod (named as the sandbox, `owner.name`), on its two volumes and its Secret. */
export function pod(namespace, owner, spec, rootfsPvc, workspacePvc, secretName) {
  const name = owner.name;
  const generation = String(spec.rootfsGeneration);
  return toJson({
    apiVersion: "v1",
    kind: "Pod",
    metadata: meta(name, namespace, owner, { labels: [[names.GENERATION_LABEL, generation]] }),
    spec: {
      runtimeClassName: spec.runtimeClass ?? names.DEFAULT_RUNTIME_CLASS,
      restartPolicy: "Always",
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      initContainers: [
        {
          name: "prepare-rootfs",
          image: spec.image,
          command: ["/bin/sh", "-c", PREPARE_ROOTFS],
          env: [env("CUBEPOD_ROOTFS_DEVICE", ROOTFS_DEVICE), env("CUBEPOD_ROOTFS_GENERATION", generation)],
          volumeDevices: [rootfsDevice()],
        },
      ],
      containers: [
        {
          name: "sandbox",
          image: spec.image,
          env: [
            env("CUBEPOD_SANDBOX", name),
            env("CUBEPOD_ROOTFS_DEVICE", ROOTFS_DEVICE),
            env("CUBEPOD_WORKSPACE_DEVICE", WORKSPACE_DEVICE),
            { name: "CUBEPOD_TOKEN", valueFrom: { secretKeyRef: { name: secretName, key: TOKEN_KEY } } },
          ],
          resources: resources(spec),
          volumeDevices: [rootfsDevice(), { name: "workspace", devicePath: WORKSPACE_DEVICE }],
        },
      ],
      volumes: [
        { name: "rootfs", persistentVolumeClaim: { claimName: rootfsPvc } },
        { name: "workspace", persistentVolumeClaim: { claimName: workspacePvc } },
      ],
    },
  });
}

const PROTOCOLS = { tcp: "TCP", udp: "UDP", sctp: "SCTP" };
/** A service port's protocol as Kubernetes writes it. */
export const protocol = (p) => PROTOCOLS[p];

/** The headless Service of `spec.service`, planned. */
export function planService(owner, service) {
  const spec = {
    clusterIP: "None",
    ports: service.ports.map((p) => ({
      name: p.name === "" ? undefined : p.name,
      port: p.port,
      protocol: protocol(p.protocol),
    })),
    selector: { [names.SANDBOX_LABEL]: owner.name },
  };
  return new Planned("Service", "v1", names.service(owner.name), owner, spec);
}

/** `<name>.<namespace>.svc.<cluster-domain>`. */
export const fqdn = (name, namespace, clusterDomain) =>
  `${names.service(name)}.${namespace}.svc.${clusterDomain}`;

// The NetworkPolicy: default-deny for the sandbox's Pod both ways, then what spec.network and
// spec.service ask for.

const matchLabels = (pairs) => ({ matchLabels: sortedMap(pairs) });

const BLOCKED = names.BLOCKED_FOR_INTERNET.map((text) => [Cidr.parse(text), text]);
const EVERYWHERE = [
  [Cidr.parse("0.0.0.0/0"), "0.0.0.0/0"],
  [Cidr.parse("::/0"), "::/0"],
];

/** [range, text] of each entry of `list` that parses (validation refused the others). */
const parsed = (list) =>
  list.flatMap((text) => {
    const cidr = Cidr.parse(text);
    return cidr ? [[cidr, text]] : [];
  });

/** The cuts with every IPv6 form of their IPv4 ranges (written out only if kept: `excepts`). */
function withForms(cuts) {
  const all = [];
  for (const [cidr, text] of cuts) {
    all.push([cidr, text]);
    for (const form of cidr.v4Forms() ?? []) all.push([form, undefined]);
  }
  return all;
}

function ipBlock(cidr, text, cuts) {
  const except = excepts(cidr, cuts);
  if (except === undefined) return undefined;
  return { ipBlock: { cidr: text, except: except.length > 0 ? except : undefined } };
}

function ipPeer(text, cuts) {
  const cidr = Cidr.parse(text);
  return cidr ? ipBlock(cidr, text, cuts) : undefined;
}

function egress(network, cluster) {
  const deny = withForms(parsed(network.denyCidrs));
  const peers = [];
  if (network.egress === "none") return [];
  if (network.egress === "internet") {
    const cuts = withForms([...BLOCKED, ...parsed(cluster.clusterCidrs)]);
    cuts.push(...deny, [NAT64_LOCAL, undefined]);
    for (const [all, text] of EVERYWHERE) {
      const peer = ipBlock(all, text, cuts);
      if (peer) peers.push(peer);
    }
  } else {
    peers.push({ namespaceSelector: {} });
    for (const c of cluster.clusterCidrs) {
      const peer = ipPeer(c, deny);
      if (peer) peers.push(peer);
    }
  }
  for (const c of network.allowCidrs) {
    const peer = ipPeer(c, deny);
    if (peer) peers.push(peer);
  }
  const rules = [];
  if (peers.length > 0) rules.push({ to: peers });
  // Without labels the DNS peer would be every pod of the DNS namespace.
  if (cluster.dnsPodLabels.length > 0) {
    rules.push({
      ports: [
        { port: 53, protocol: "UDP" },
        { port: 53, protocol: "TCP" },
      ],
      to: [
        {
          namespaceSelector: matchLabels([[names.NAMESPACE_NAME_LABEL, cluster.dnsNamespace]]),
          podSelector: matchLabels(cluster.dnsPodLabels),
        },
      ],
    });
  }
  return rules;
}

function ingress(service, cluster) {
  if (service == null || service.ports.length === 0 || cluster.ingressFrom.length === 0) return [];
  return [
    {
      from: [{ namespaceSelector: {}, podSelector: matchLabels(cluster.ingressFrom) }],
      ports: service.ports.map((p) => ({ port: p.port, protocol: protocol(p.protocol) })),
    },
  ];
}

/** The sandbox's NetworkPolicy `<name>-network`, planned from its spec and the cluster's network. */
export function planNetworkPolicy(owner, spec, cluster) {
  const egressRules = egress(spec.network, cluster);
  const ingressRules = ingress(spec.service, cluster);
  const policySpec = {
    egress: egressRules.length > 0 ? egressRules : undefined,
    ingress: ingressRules.length > 0 ? ingressRules : undefined,
    podSelector: { matchLabels: { [names.SANDBOX_LABEL]: owner.name } },
    policyTypes: ["Ingress", "Egress"],
  };
  return new Planned("NetworkPolicy", "networking.k8s.io/v1", names.networkPolicy(owner.name), owner, policySpec);
}

// Pool members.

const DESIRED = { running: "Running", paused: "Paused" };
const EGRESS = { internet: "Internet", none: "None", cluster: "Cluster" };
const SHUTDOWN = { delete: "Delete", pause: "Pause" };

function memberSpec(t) {
  const hasResources = t.cpu != null || t.memory != null;
  return {
    image: t.image,
    desiredState: DESIRED[t.desiredState],
    rootfsGeneration: t.rootfsGeneration,
    idleTimeoutSeconds: t.idleTimeoutSeconds ?? undefined,
    resources: hasResources ? { cpu: t.cpu ?? undefined, memory: t.memory ?? undefined } : undefined,
    storage: {
      storageClassName: t.storageClass ?? undefined,
      rootfsSize: t.rootfsSize,
      workspaceSize: t.workspaceSize,
    },
    runtimeClassName: t.runtimeClass ?? undefined,
    network: {
      egress: EGRESS[t.network.egress],
      allowCIDRs: t.network.allowCidrs.length > 0 ? t.network.allowCidrs : undefined,
      denyCIDRs: t.network.denyCidrs.length > 0 ? t.network.denyCidrs : undefined,
    },
    service:
      t.service != null
        ? {
            ports: t.service.ports.map((p) => ({
              name: p.name === "" ? undefined : p.name,
              port: p.port,
              protocol: protocol(p.protocol),
            })),
          }
        : undefined,
    shutdownPolicy: SHUTDOWN[t.shutdownPolicy],
  };
}

/** The digest of a pool template: members made from it carry it as `cubepod.io/template-hash`. */
export const templateHash = (template) => digest(toJson(memberSpec(template)));

/** A member Sandbox of a warm pool (`pool` is its owner: {kind, name, uid}). */
export function poolMember(name, namespace, pool, template) {
  const spec = memberSpec(template);
  const hash = digest(toJson(spec));
  return toJson({
    apiVersion: names.API_VERSION,
    kind: "Sandbox",
    metadata: meta(name, namespace, pool, {
      child: false,
      labels: [
        [names.POOL_LABEL, pool.name],
        [names.TEMPLATE_HASH_LABEL, hash],
      ],
    }),
    spec,
  });
}

export { compareStrings };

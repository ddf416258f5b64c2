// SPDX-License-Identifier: Apache-2.0
// Offline schema check of rendered Kubernetes objects (the output of `kubectl kustomize`): two
// passes with npm packages generated from the Kubernetes OpenAPI spec, then a cross-check:
//   1. kubernetes-models' validate(): types, formats, enums, required fields;
//   2. @kubernetes/client-node's model attribute maps: every field of every object must be a
//      field the API knows (the models above accept unknown fields, and a misspelled
//      `readOnlyRootFileSystem` is exactly the mistake a manifest makes);
//   3. crossCheck(): the references between the objects (selectors, names, ports, volumes).
// A ServiceMonitor (the Prometheus Operator's CRD, overlays/prometheus-operator) has no npm
// model: its fields are checked against SERVICE_MONITOR_SPEC below, written from the CRD's Go
// types (prometheus-operator pkg/apis/monitoring/v1: servicemonitor_types.go Endpoint and
// ServiceMonitorSpec, types.go SafeTLSConfig, SafeAuthorization, SecretOrConfigMap).
// Usage: node check_manifests.mjs rendered.yaml   (exit 1 and one line per problem)
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import YAML from "yaml";

const here = path.dirname(fileURLToPath(import.meta.url));
const clientModels = path.join(here, "node_modules/@kubernetes/client-node/dist/gen/models");

// apiVersion/kind → [kubernetes-models module, client-node model]
const KINDS = {
  "v1/Namespace": ["v1/Namespace", "V1Namespace"],
  "v1/ServiceAccount": ["v1/ServiceAccount", "V1ServiceAccount"],
  "v1/Service": ["v1/Service", "V1Service"],
  "v1/ConfigMap": ["v1/ConfigMap", "V1ConfigMap"],
  "v1/Secret": ["v1/Secret", "V1Secret"],
  "apps/v1/StatefulSet": ["apps/v1/StatefulSet", "V1StatefulSet"],
  "policy/v1/PodDisruptionBudget": ["policy/v1/PodDisruptionBudget", "V1PodDisruptionBudget"],
  "networking.k8s.io/v1/NetworkPolicy": ["networking.k8s.io/v1/NetworkPolicy", "V1NetworkPolicy"],
};

// A shape: "string" | "integer" | "boolean" for scalars, an object of field → shape, or
// [shape] for a list. Fields not listed are unknown (as for the models above).
const KEY_SELECTOR = { name: "string", key: "string", optional: "boolean" };
const SECRET_OR_CONFIGMAP = { secret: KEY_SELECTOR, configMap: KEY_SELECTOR };
const LABEL_SELECTOR = {
  matchLabels: { "*": "string" },
  matchExpressions: [{ key: "string", operator: "string", values: ["string"] }],
};
const RELABEL = [{ sourceLabels: ["string"], separator: "string", targetLabel: "string", regex: "string",
                   modulus: "integer", replacement: "string", action: "string" }];
const SERVICE_MONITOR_SPEC = {
  jobLabel: "string", targetLabels: ["string"], podTargetLabels: ["string"],
  selector: LABEL_SELECTOR,
  namespaceSelector: { any: "boolean", matchNames: ["string"] },
  sampleLimit: "integer", targetLimit: "integer", scrapeClass: "string",
  endpoints: [{
    port: "string", targetPort: "string", path: "string", scheme: "string",
    params: { "*": ["string"] }, interval: "string", scrapeTimeout: "string",
    honorLabels: "boolean", honorTimestamps: "boolean", followRedirects: "boolean",
    enableHttp2: "boolean", filterRunning: "boolean", proxyUrl: "string",
    tlsConfig: { ca: SECRET_OR_CONFIGMAP, cert: SECRET_OR_CONFIGMAP, keySecret: KEY_SELECTOR,
                 serverName: "string", insecureSkipVerify: "boolean", minVersion: "string",
                 maxVersion: "string" },
    authorization: { type: "string", credentials: KEY_SELECTOR },
    bearerTokenSecret: KEY_SELECTOR,
    metricRelabelings: RELABEL, relabelings: RELABEL,
  }],
};

function checkShape(value, shape, where) {
  if (Array.isArray(shape)) {
    if (!Array.isArray(value)) return problems.push(`${where}: expected a list`);
    value.forEach((v, i) => checkShape(v, shape[0], `${where}[${i}]`));
    return;
  }
  if (typeof shape === "string") {
    const ok = shape === "integer" ? Number.isInteger(value) : typeof value === shape;
    if (!ok) problems.push(`${where}: expected ${shape}, got ${JSON.stringify(value)}`);
    return;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return problems.push(`${where}: expected an object`);
  for (const [k, v] of Object.entries(value)) {
    const field = shape[k] ?? shape["*"];
    if (field === undefined) {
      problems.push(`${where}.${k}: unknown field (it has ${Object.keys(shape).join(", ")})`);
      continue;
    }
    checkShape(v, field, `${where}.${k}`);
  }
}

const CUSTOM_KINDS = {
  "monitoring.coreos.com/v1/ServiceMonitor": async (obj, id) => {
    await checkFields(obj.metadata, "V1ObjectMeta", `${id}.metadata`);
    for (const k of Object.keys(obj)) {
      if (!["apiVersion", "kind", "metadata", "spec"].includes(k)) problems.push(`${id}.${k}: unknown field`);
    }
    if (!obj.spec?.selector) problems.push(`${id}: spec.selector is required`);
    if (!obj.spec?.endpoints?.length) problems.push(`${id}: spec.endpoints is empty: nothing is scraped`);
    checkShape(obj.spec ?? {}, SERVICE_MONITOR_SPEC, `${id}.spec`);
  },
};

const modelCache = new Map();
async function attributes(model) {
  if (!modelCache.has(model)) {
    const file = path.join(clientModels, model + ".js");
    modelCache.set(model, fs.existsSync(file)
      ? (await import(pathToFileURL(file).href))[model].getAttributeTypeMap()
      : null);
  }
  return modelCache.get(model);
}

const problems = [];

async function checkFields(value, type, where) {
  if (value === null || value === undefined) return;
  let m;
  if ((m = /^Array<(.+)>$/.exec(type))) {
    if (!Array.isArray(value)) return problems.push(`${where}: expected a list (${type})`);
    for (let i = 0; i < value.length; i++) await checkFields(value[i], m[1], `${where}[${i}]`);
    return;
  }
  if ((m = /^\{ \[key: string\]: (.+); \}$/.exec(type))) {
    if (typeof value !== "object" || Array.isArray(value)) return problems.push(`${where}: expected a map`);
    for (const [k, v] of Object.entries(value)) await checkFields(v, m[1], `${where}.${k}`);
    return;
  }
  const attrs = await attributes(type);
  if (attrs === null) return;  // a scalar: string, number, boolean, Date, IntOrString, any
  if (typeof value !== "object" || Array.isArray(value)) return problems.push(`${where}: expected an object (${type})`);
  for (const [k, v] of Object.entries(value)) {
    const attr = attrs.find((a) => a.baseName === k);
    if (attr === undefined) {
      problems.push(`${where}.${k}: unknown field (${type} has ${attrs.map((a) => a.baseName).join(", ")})`);
      continue;
    }
    await checkFields(v, attr.type, `${where}.${k}`);
  }
}

// What a schema cannot see: the references between objects. Selectors of Services, PDBs and
// NetworkPolicies pick the pods, serviceName names a Service, target ports name container
// ports, mounts name volumes, and the ConfigMaps a pod uses are rendered too.
function crossCheck(objects) {
  const byKind = (k) => objects.filter((o) => o.kind === k);
  const matches = (sel, labels) => Object.entries(sel ?? {}).every(([k, v]) => labels?.[k] === v);
  const pods = byKind("StatefulSet").map((s) => ({ set: s, tpl: s.spec.template }));
  const selects = (what, sel) => {
    if (!pods.some((p) => matches(sel, p.tpl.metadata?.labels))) problems.push(`${what}: selector ${JSON.stringify(sel)} matches no pod template`);
  };
  for (const s of byKind("Service")) selects(`Service/${s.metadata.name}`, s.spec.selector);
  for (const p of byKind("PodDisruptionBudget")) selects(`PodDisruptionBudget/${p.metadata.name}`, p.spec.selector?.matchLabels);
  for (const n of byKind("NetworkPolicy")) selects(`NetworkPolicy/${n.metadata.name}`, n.spec.podSelector?.matchLabels);
  for (const { set, tpl } of pods) {
    const id = `StatefulSet/${set.metadata.name}`;
    if (!byKind("Service").some((s) => s.metadata.name === set.spec.serviceName)) problems.push(`${id}: serviceName ${set.spec.serviceName} is no Service here`);
    const ports = tpl.spec.containers.flatMap((c) => c.ports ?? []).map((p) => p.name);
    for (const s of byKind("Service").filter((s) => matches(s.spec.selector, tpl.metadata?.labels))) {
      for (const p of s.spec.ports) {
        if (typeof p.targetPort === "string" && !ports.includes(p.targetPort)) problems.push(`Service/${s.metadata.name}: targetPort ${p.targetPort} is no container port of ${id}`);
      }
    }
    const volumes = (tpl.spec.volumes ?? []).map((v) => v.name).concat((set.spec.volumeClaimTemplates ?? []).map((v) => v.metadata.name));
    for (const c of tpl.spec.containers) {
      for (const m of c.volumeMounts ?? []) if (!volumes.includes(m.name)) problems.push(`${id}: container ${c.name} mounts unknown volume ${m.name}`);
    }
    for (const v of tpl.spec.volumes ?? []) {
      if (v.configMap && !byKind("ConfigMap").some((c) => c.metadata.name === v.configMap.name)) problems.push(`${id}: volume ${v.name} names ConfigMap ${v.configMap.name}, not rendered`);
    }
    if (tpl.spec.serviceAccountName && !byKind("ServiceAccount").some((a) => a.metadata.name === tpl.spec.serviceAccountName)) problems.push(`${id}: ServiceAccount ${tpl.spec.serviceAccountName} not rendered`);
  }
  // A ServiceMonitor selects Services by their own labels, in its namespaces, and scrapes
  // ports by name: at least one endpoint of a selected Service must exist.
  for (const m of byKind("ServiceMonitor")) {
    const id = `ServiceMonitor/${m.metadata.name}`;
    const names = m.spec.namespaceSelector?.matchNames ?? [m.metadata.namespace];
    const services = byKind("Service").filter((s) => names.includes(s.metadata.namespace) &&
                                                     matches(m.spec.selector?.matchLabels, s.metadata.labels));
    if (services.length === 0) problems.push(`${id}: selector ${JSON.stringify(m.spec.selector)} matches no Service`);
    for (const e of m.spec.endpoints ?? []) {
      if (!services.some((s) => s.spec.ports.some((p) => p.name === e.port))) problems.push(`${id}: endpoint port ${e.port} is no port of a selected Service`);
    }
  }
}

const file = process.argv[2];
const docs = YAML.parseAllDocuments(fs.readFileSync(file, "utf8"));
const objects = [];
let count = 0;
for (const doc of docs) {
  if (doc.errors.length) { problems.push(`${file}: ${doc.errors[0].message}`); continue; }
  const obj = doc.toJS();
  if (obj === null) continue;
  count++;
  objects.push(obj);
  const id = `${obj.kind}/${obj.metadata?.name}`;
  const custom = CUSTOM_KINDS[`${obj.apiVersion}/${obj.kind}`];
  if (custom) { await custom(obj, id); continue; }
  const entry = KINDS[`${obj.apiVersion}/${obj.kind}`];
  if (!entry) { problems.push(`${id}: no schema known for ${obj.apiVersion} ${obj.kind}`); continue; }
  const [modelPath, clientModel] = entry;
  const mod = await import(`kubernetes-models/${modelPath}`);
  const Model = mod[obj.kind];
  try {
    new Model(obj).validate();
  } catch (e) {
    problems.push(`${id}: ${e.message}`);
  }
  await checkFields(obj, clientModel, id);
}
crossCheck(objects);
for (const p of problems) console.log(p);
console.log(`${file}: ${count} objects, ${problems.length} problems`);
process.exit(problems.length === 0 && count > 0 ? 0 : 1);

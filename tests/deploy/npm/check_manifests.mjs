// Offline schema check of rendered Kubernetes objects (the output of `kubectl kustomize`), in
// two passes, both from npm packages generated from the Kubernetes OpenAPI spec:
//   1. kubernetes-models' validate(): types, formats, enums, required fields;
//   2. @kubernetes/client-node's model attribute maps: every field of every object must be a
//      field the API knows (the models above accept unknown fields, and a misspelled
//      `readOnlyRootFileSystem` is exactly the mistake a manifest makes).
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

const file = process.argv[2];
const docs = YAML.parseAllDocuments(fs.readFileSync(file, "utf8"));
let count = 0;
for (const doc of docs) {
  if (doc.errors.length) { problems.push(`${file}: ${doc.errors[0].message}`); continue; }
  const obj = doc.toJS();
  if (obj === null) continue;
  count++;
  const id = `${obj.kind}/${obj.metadata?.name}`;
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
for (const p of problems) console.log(p);
console.log(`${file}: ${count} objects, ${problems.length} problems`);
process.exit(problems.length === 0 && count > 0 ? 0 : 1);

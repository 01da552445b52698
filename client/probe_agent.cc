#include "client/probe_agent.h"

#include <curl/curl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "client/upstream_failure.h"
#include "yaml-cpp/yaml.h"

namespace failover::client {
namespace {

size_t Collect(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

// Keeps the reply's headers that carry reset times ("Name: value\r\n" lines).
size_t CollectHeader(char* data, size_t size, size_t n, void* out) {
  const absl::string_view line(data, size * n);
  const size_t colon = line.find(':');
  if (colon != absl::string_view::npos && IsResetHeader(line.substr(0, colon))) {
    static_cast<std::vector<std::pair<std::string, std::string>>*>(out)->emplace_back(
        std::string(line.substr(0, colon)), std::string(absl::StripAsciiWhitespace(line.substr(colon + 1))));
  }
  return size * n;
}

v1::TransportError TransportFor(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT: return v1::TRANSPORT_ERROR_CONNECT_REFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return v1::TRANSPORT_ERROR_DNS;
    case CURLE_OPERATION_TIMEDOUT: return v1::TRANSPORT_ERROR_TIMEOUT;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE: return v1::TRANSPORT_ERROR_TLS;
    default: return v1::TRANSPORT_ERROR_RESET;
  }
}

bool ListsModel(const std::string& body, const std::string& model) {
  try {
    const YAML::Node data = YAML::Load(body)["data"];  // JSON is YAML
    if (!data || !data.IsSequence()) return false;
    for (const auto& m : data) {
      if (m["id"] && m["id"].as<std::string>() == model) return true;
    }
  } catch (const YAML::Exception&) {
  }
  return false;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

}  // namespace

v1::ProbeResult CheckOpenAiTarget(const v1::ProbeTask& task) {
  v1::ProbeResult result;
  result.set_lease_id(task.lease_id());
  auto fail = [&](const std::string& message) {
    result.set_outcome(v1::PROBE_OUTCOME_FAIL);
    result.mutable_failure()->set_message(message);
    return result;
  };
  const auto base_it = task.labels().find("base_url");
  if (base_it == task.labels().end() || base_it->second.empty()) return fail("target has no base_url label");
  std::string base = base_it->second;
  while (!base.empty() && base.back() == '/') base.pop_back();

  CURL* curl = curl_easy_init();
  if (curl == nullptr) return fail("cannot initialise libcurl");
  curl_slist* headers = nullptr;
  if (auto key = task.labels().find("api_key_env"); key != task.labels().end()) {
    if (const char* value = std::getenv(key->second.c_str())) {
      headers = curl_slist_append(headers, absl::StrCat("Authorization: Bearer ", value).c_str());
    }
  }
  for (const auto& [label, value] : task.labels()) {
    if (absl::StartsWith(label, "header.")) {
      headers = curl_slist_append(headers, absl::StrCat(label.substr(7), ": ", value).c_str());
    }
  }
  const bool recovery = task.kind() == v1::PROBE_KIND_RECOVERY;
  std::string body;
  std::string request;
  if (recovery) {
    request = absl::StrCat("{\"model\":", JsonString(task.upstream_model()),
                           ",\"messages\":[{\"role\":\"user\",\"content\":\"ping\"}],\"max_tokens\":1}");
    headers = curl_slist_append(headers, "Content-Type: application/json");
    curl_easy_setopt(curl, CURLOPT_URL, (base + "/chat/completions").c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.c_str());
  } else {
    curl_easy_setopt(curl, CURLOPT_URL, (base + "/models").c_str());
  }
  const long timeout_ms = static_cast<long>(task.timeout().seconds() * 1000 + task.timeout().nanos() / 1000000);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 5000L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  std::vector<std::pair<std::string, std::string>> reply_headers;
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, CollectHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &reply_headers);
  const auto start = std::chrono::steady_clock::now();
  const CURLcode code = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  const auto elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
  result.mutable_latency()->set_seconds(elapsed.count() / 1000000000);
  result.mutable_latency()->set_nanos(static_cast<int32_t>(elapsed.count() % 1000000000));

  if (code != CURLE_OK) {
    fail(curl_easy_strerror(code));
    result.mutable_failure()->set_transport_error(TransportFor(code));
    return result;
  }
  if (status < 200 || status >= 300) {
    // The raw reply, as every caller's helper sends it: failoverd classifies
    // it (a plain 429 rate limit counts as THROTTLED; an exhausted quota fails).
    result.set_outcome(v1::PROBE_OUTCOME_FAIL);
    *result.mutable_failure() = FailureFromResponse(static_cast<uint32_t>(status), reply_headers, body);
    return result;
  }
  if (!recovery && !ListsModel(body, task.upstream_model())) {
    if (task.target_kind() == v1::TARGET_KIND_LOCAL && task.warm()) {
      result.set_outcome(v1::PROBE_OUTCOME_NOT_LOADED);  // the backend answers; the model is not loaded
      return result;
    }
    return fail(absl::StrCat("model not found: ", task.upstream_model(), " is not listed by GET /models"));
  }
  result.set_outcome(v1::PROBE_OUTCOME_PASS);
  return result;
}

int RunProbeAgent(v1::DecisionService::StubInterface* stub, const ConnectionOptions& connection,
                  const ProbeAgentOptions& options) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  std::vector<v1::ProbeResult> pending;
  double backoff = 0.2;
  while (options.stop == nullptr || !options.stop->load()) {
    v1::ProbeRequest req;
    req.set_prober_id(options.id);
    req.set_max_tasks(options.max_tasks);
    for (auto& r : pending) *req.add_results() = std::move(r);
    pending.clear();
    v1::ProbeResponse resp;
    grpc::ClientContext ctx;
    PrepareContext(connection, &ctx);
    const grpc::Status s = stub->Probe(&ctx, req, &resp);
    if (!s.ok()) {
      std::fprintf(stderr, "probe-agent: %s; retrying\n", s.error_message().c_str());
      for (const auto& r : req.results()) pending.push_back(r);  // may be stale by then; failoverd decides
      std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(backoff * 1000)));
      backoff = std::min(backoff * 2, options.max_wait_seconds);
      continue;
    }
    backoff = 0.2;
    std::vector<std::future<v1::ProbeResult>> running;
    for (const auto& task : resp.tasks()) {
      running.push_back(std::async(std::launch::async, [task] { return CheckOpenAiTarget(task); }));
    }
    for (auto& f : running) pending.push_back(f.get());
    if (!pending.empty()) continue;  // report at once
    const double wait = std::min(options.max_wait_seconds,
                                 std::max(0.05, resp.next_call_after().seconds() + resp.next_call_after().nanos() / 1e9));
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(wait * 1000)));
  }
  curl_global_cleanup();
  return 0;
}

}  // namespace failover::client

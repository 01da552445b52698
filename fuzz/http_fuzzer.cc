// libFuzzer target: any bytes as an HTTP request to failoverd's JSON face,
// written as "METHOD TARGET\nheader: value\n...\n\nbody". The gateway routes
// it, reads the JSON body, query or path, and calls the RPC on a fresh world.
// Beyond not crashing: every answer is a bounded UTF-8 JSON object with an
// HTTP status, a refused request changes nothing, and whatever the request did,
// everything failoverd then sends is still a valid message.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "common/utf8.h"
#include "fuzz/request_world.h"
#include "google/protobuf/stubs/logging.h"
#include "server/http/gateway.h"
#include "server/log/log.h"

namespace {

using failover::http::Gateway;
using failover::http::PercentDecode;
using failover::http::Request;

// The request line, headers and body, as the HTTP server hands them over.
Request Parse(const std::string& text, std::string* last_event_id) {
  Request r;
  const size_t blank = text.find("\n\n");
  const std::string head = text.substr(0, blank);
  if (blank != std::string::npos) r.body = text.substr(blank + 2);
  std::vector<std::string> lines = absl::StrSplit(head, '\n');
  const std::vector<std::string> request_line = absl::StrSplit(lines[0], absl::MaxSplits(' ', 1));
  r.method = request_line[0];
  const std::string target = request_line.size() > 1 ? request_line[1] : "/";
  const size_t question = target.find('?');
  r.path = target.substr(0, question);
  if (question != std::string::npos) {
    for (absl::string_view pair : absl::StrSplit(target.substr(question + 1), '&', absl::SkipEmpty())) {
      const std::vector<std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
      std::string key, value;
      if (!PercentDecode(kv[0], &key)) key = kv[0];
      if (kv.size() > 1 && !PercentDecode(kv[1], &value)) value = kv[1];
      r.query.emplace_back(key, value);
    }
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    const std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
    const std::string value(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    if (name == "content-type") r.content_type = value;
    if (name == "authorization") r.authorization = value;
    if (name == "sec-fetch-site") r.sec_fetch_site = value;
    if (name == "last-event-id") *last_event_id = value;
  }
  return r;
}

void CheckAnswer(const failover::http::Response& answer) {
  if (answer.status < 200 || answer.status > 599) __builtin_trap();
  if (!failover::IsValidUtf8(answer.body)) __builtin_trap();
  if (answer.body.size() > (8u << 20)) __builtin_trap();
  if (!absl::StartsWith(answer.body, "{") || !absl::EndsWith(answer.body, "}\n")) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  grpc_init();
  failover::log::Configure(failover::log::Level::kError, /*json=*/false);
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;  // the port refuses larger bodies before the gateway
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string last_event_id;
  const Request request = Parse(text, &last_event_id);
  failover::fuzz::World world;
  const uint64_t generation = world.engine.generation();
  Gateway gateway([&world](const std::string& method, const std::string& in, std::string* out, const Request&) {
    const std::string name = method.substr(method.rfind('/') + 1);
    for (const failover::fuzz::Method& m : failover::fuzz::Methods()) {
      if (m.name != name) continue;
      grpc::Slice slice(in);
      const grpc::ByteBuffer buffer(&slice, 1);
      const absl::Status s = m.run(world, buffer, out);
      return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
    }
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no such method");
  });
  const failover::http::Response answer = gateway.Handle(request);
  CheckAnswer(answer);
  if (answer.status != 200 && world.engine.generation() != generation) __builtin_trap();
  if (!failover::fuzz::EverythingSentIsValid(world)) __builtin_trap();

  failover::v1::WatchEventsRequest watch;
  const grpc::Status parsed = Gateway::WatchRequestFrom(request, last_event_id, &watch);
  if (!parsed.ok()) CheckAnswer(Gateway::Error(parsed));
  failover::v1::Event event;
  event.set_sequence(watch.after_sequence());
  const std::string sse = Gateway::ToServerSentEvent(event);
  if (!failover::IsValidUtf8(sse) || !absl::EndsWith(sse, "\n\n")) __builtin_trap();
  return 0;
}

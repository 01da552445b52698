#include "server/http/gateway.h"

#include <cstring>
#include <memory>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/json_string.h"
#include "common/utf8.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/type_resolver_util.h"

namespace failover::http {
namespace {

namespace pb = ::google::protobuf;

enum class From { kBody, kQuery, kPathName };

struct Route {
  const char* http_method;
  const char* path;  // exact; for kPathName the prefix before the name
  const char* rpc;   // the gRPC method called
  From from;
  const char* name_field = "";    // kPathName: the request field the name goes into
  const char* fixed_json = "";    // merged into every request (enable/disable)
};

constexpr char kDecide[] = "/failover.v1.DecisionService/";
constexpr char kAdmin[] = "/failover.v1.AdminService/";
constexpr char kTypeUrlPrefix[] = "type.googleapis.com";

const std::vector<Route>& Routes() {
  static const auto* routes = new std::vector<Route>{
      {"POST", "/v1/pick", "PickTarget", From::kBody},
      {"POST", "/v1/report", "ReportOutcome", From::kBody},
      {"POST", "/v1/probe", "Probe", From::kBody},
      {"GET", "/v1/status", "GetStatus", From::kQuery},
      {"GET", "/v1/events", "ListEvents", From::kQuery},
      {"POST", "/v1/admin/apply", "Apply", From::kBody},
      {"GET", "/v1/admin/targets", "ListTargets", From::kQuery},
      {"GET", "/v1/admin/targets/", "GetTarget", From::kPathName, "name"},
      {"DELETE", "/v1/admin/targets/", "DeleteTarget", From::kPathName, "name"},
      {"GET", "/v1/admin/chains", "ListChains", From::kQuery},
      {"GET", "/v1/admin/chains/", "GetChain", From::kPathName, "name"},
      {"DELETE", "/v1/admin/chains/", "DeleteChain", From::kPathName, "name"},
      {"POST", "/v1/admin/pin", "PinChain", From::kBody},
      {"POST", "/v1/admin/unpin", "UnpinChain", From::kBody},
      {"POST", "/v1/admin/trigger", "TriggerFailover", From::kBody},
      {"POST", "/v1/admin/cancel", "CancelFailover", From::kBody},
      {"POST", "/v1/admin/enable", "SetTargetEnabled", From::kBody, "", "{\"enabled\":true}"},
      {"POST", "/v1/admin/disable", "SetTargetEnabled", From::kBody, "", "{\"enabled\":false}"},
      {"POST", "/v1/admin/probe-now", "ProbeNow", From::kBody},
      {"GET", "/v1/admin/trace", "ListTrace", From::kQuery},
      {"POST", "/v1/admin/simulate", "Simulate", From::kBody},
  };
  return *routes;
}

bool IsDecideMethod(absl::string_view rpc) {
  return rpc == "PickTarget" || rpc == "ReportOutcome" || rpc == "Probe";
}

const pb::MethodDescriptor* FindMethod(absl::string_view rpc) {
  const pb::DescriptorPool* pool = pb::DescriptorPool::generated_pool();
  const char* service = IsDecideMethod(rpc) ? "failover.v1.DecisionService" : "failover.v1.AdminService";
  const pb::ServiceDescriptor* s = pool->FindServiceByName(service);
  return s == nullptr ? nullptr : s->FindMethodByName(std::string(rpc));
}

std::unique_ptr<pb::Message> NewMessage(const pb::Descriptor* type) {
  const pb::Message* prototype = pb::MessageFactory::generated_factory()->GetPrototype(type);
  return std::unique_ptr<pb::Message>(prototype->New());
}

// What a client sent, quoted for an error message: bounded and valid UTF-8.
std::string Echo(absl::string_view s) {
  return absl::StrCat("\"", absl::CHexEscape(SanitizeUtf8(s, 64)), "\"");
}

grpc::Status Invalid(const std::string& message) { return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message); }

// Sets one query parameter on `m` by its proto or JSON field name.
grpc::Status SetFromQuery(const std::string& key, const std::string& value, pb::Message* m) {
  const pb::Descriptor* d = m->GetDescriptor();
  const pb::FieldDescriptor* f = d->FindFieldByName(key);
  if (f == nullptr) f = d->FindFieldByCamelcaseName(key);
  if (f == nullptr && key == "after") f = d->FindFieldByName("after_sequence");
  if (f == nullptr) {
    return Invalid(absl::StrCat("query parameter ", Echo(key), ": not a field of ", d->full_name()));
  }
  const pb::Reflection* r = m->GetReflection();
  auto bad_number = [&] { return Invalid(absl::StrCat(f->name(), ": not a number: ", Echo(value))); };
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_STRING:
      if (!IsValidUtf8(value)) return Invalid(absl::StrCat(f->name(), ": is not valid UTF-8"));
      if (f->is_repeated()) {
        r->AddString(m, f, value);
      } else {
        r->SetString(m, f, value);
      }
      return grpc::Status::OK;
    case pb::FieldDescriptor::CPPTYPE_BOOL: {
      bool v = false;
      if (f->is_repeated() || !absl::SimpleAtob(value, &v)) {
        return Invalid(absl::StrCat(f->name(), ": expected true or false, got ", Echo(value)));
      }
      r->SetBool(m, f, v);
      return grpc::Status::OK;
    }
    case pb::FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t v = 0;
      if (f->is_repeated() || !absl::SimpleAtoi(value, &v)) return bad_number();
      r->SetUInt32(m, f, v);
      return grpc::Status::OK;
    }
    case pb::FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v = 0;
      if (f->is_repeated() || !absl::SimpleAtoi(value, &v)) return bad_number();
      r->SetUInt64(m, f, v);
      return grpc::Status::OK;
    }
    case pb::FieldDescriptor::CPPTYPE_ENUM: {
      // The value's name, as in JSON (kinds=EVENT_KIND_CHAIN_SWITCHED); repeatable.
      const pb::EnumValueDescriptor* v = f->enum_type()->FindValueByName(value);
      if (v == nullptr || v->number() == 0) {
        return Invalid(absl::StrCat(f->name(), ": not a value of ", f->enum_type()->full_name(), ": ", Echo(value)));
      }
      if (f->is_repeated()) {
        r->AddEnumValue(m, f, v->number());
      } else {
        r->SetEnumValue(m, f, v->number());
      }
      return grpc::Status::OK;
    }
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      // A time or a duration as in JSON (since=2026-12-04T06:00:00Z, timeout=1.5s).
      if (!f->is_repeated() && (f->message_type()->full_name() == "google.protobuf.Timestamp" ||
                                f->message_type()->full_name() == "google.protobuf.Duration")) {
        if (!pb::util::JsonStringToMessage(JsonString(value), r->MutableMessage(m, f)).ok()) {
          const bool time = f->message_type()->full_name() == "google.protobuf.Timestamp";
          return Invalid(absl::StrCat(f->name(), ": not ", time ? "an RFC 3339 time such as \"2026-12-04T06:00:00Z\""
                                                                : "a duration such as \"1.5s\"",
                                      ": ", Echo(value)));
        }
        return grpc::Status::OK;
      }
      [[fallthrough]];
    default:
      return Invalid(absl::StrCat("query parameter ", Echo(key), ": cannot be given in the query"));
  }
}

Response Json(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

}  // namespace

int Gateway::HttpStatusOf(grpc::StatusCode code) {
  // The mapping gRPC gateways use (google.rpc.Code to HTTP).
  switch (code) {
    case grpc::StatusCode::OK: return 200;
    case grpc::StatusCode::CANCELLED: return 499;
    case grpc::StatusCode::INVALID_ARGUMENT: return 400;
    case grpc::StatusCode::DEADLINE_EXCEEDED: return 504;
    case grpc::StatusCode::NOT_FOUND: return 404;
    case grpc::StatusCode::ALREADY_EXISTS: return 409;
    case grpc::StatusCode::PERMISSION_DENIED: return 403;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return 429;
    case grpc::StatusCode::FAILED_PRECONDITION: return 400;
    case grpc::StatusCode::ABORTED: return 409;
    case grpc::StatusCode::OUT_OF_RANGE: return 400;
    case grpc::StatusCode::UNIMPLEMENTED: return 501;
    case grpc::StatusCode::UNAVAILABLE: return 503;
    case grpc::StatusCode::UNAUTHENTICATED: return 401;
    default: return 500;
  }
}

namespace {
const char* CodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                                       "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
                                       "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? kNames[i] : "UNKNOWN";
}

}  // namespace

Response Gateway::Error(const grpc::Status& status, int http_status) {
  const int http = http_status != 0 ? http_status : HttpStatusOf(status.error_code());
  return Json(http, absl::StrCat("{\"error\":{\"code\":", http, ",\"status\":\"", CodeName(status.error_code()),
                                 "\",\"message\":", JsonString(SanitizeUtf8(status.error_message(), 4096)), "}}\n"));
}

bool PercentDecode(const std::string& s, std::string* out) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out->push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return false;
    const int high = hex(s[i + 1]);
    const int low = hex(s[i + 2]);
    if (high < 0 || low < 0) return false;
    out->push_back(static_cast<char>(high * 16 + low));
    i += 2;
  }
  return true;
}

grpc::Status Gateway::WatchRequestFrom(const Request& request, const std::string& last_event_id,
                                      failover::v1::WatchEventsRequest* out) {
  for (const auto& [key, value] : request.query) {
    if (key != "chains" && key != "targets" && key != "after" && key != "include_shadow") {
      return Invalid(
          absl::StrCat("query parameter ", Echo(key), ": expected chains, targets, after or include_shadow"));
    }
    const grpc::Status s = SetFromQuery(key, value, out);
    if (!s.ok()) return s;
  }
  if (!last_event_id.empty()) {
    uint64_t after = 0;
    if (!absl::SimpleAtoi(last_event_id, &after)) {
      return Invalid(absl::StrCat("Last-Event-ID: not a sequence: ", Echo(last_event_id)));
    }
    out->set_after_sequence(after);
  }
  return grpc::Status::OK;
}

std::string Gateway::ToServerSentEvent(const failover::v1::Event& event) {
  std::string json;
  if (!pb::util::MessageToJsonString(event, &json).ok()) json = "{}";
  const char* kind = event.has_snapshot()         ? "snapshot"
                     : event.has_chain_switched() ? "chain_switched"
                     : event.has_target_state()   ? "target_state"
                     : event.has_config_changed() ? "config_changed"
                                                  : "event";
  std::string out;
  // A shadow event carries no id: it is not a point to resume after, and an
  // EventSource would otherwise resume from 0.
  if (!event.shadow().empty()) return absl::StrCat("event: shadow\ndata: ", json, "\n\n");
  if (!(event.has_snapshot() && event.snapshot().more())) absl::StrAppend(&out, "id: ", event.sequence(), "\n");
  absl::StrAppend(&out, "event: ", kind, "\ndata: ", json, "\n\n");
  return out;
}

Response Gateway::Handle(const Request& request) const {
  Call call = Prepare(request);
  if (call.answer.has_value()) return std::move(*call.answer);
  std::string response;
  const grpc::Status status = call_(call.method, call.request, &response, request);
  return Finish(call, status, response);
}

Gateway::Call Gateway::Prepare(const Request& request) {
  const auto answer = [](Response r) {
    Call call;
    call.answer = std::move(r);
    return call;
  };
  const Route* route = nullptr;
  bool path_known = false;
  std::string name;
  for (const Route& r : Routes()) {
    const bool named = r.from == From::kPathName;
    const bool match = named ? absl::StartsWith(request.path, r.path) && request.path.size() > strlen(r.path)
                             : request.path == r.path;
    if (!match) continue;
    path_known = true;
    if (request.method != r.http_method) continue;
    route = &r;
    if (named && !PercentDecode(request.path.substr(strlen(r.path)), &name)) {
      return answer(Error(Invalid(absl::StrCat("path: malformed percent-escape in ", Echo(request.path)))));
    }
    break;
  }
  if (route == nullptr) {
    if (path_known) {
      return answer(Error(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                absl::StrCat("method ", Echo(request.method), " is not allowed on ", Echo(request.path))),
                   405));
    }
    return answer(Error(grpc::Status(grpc::StatusCode::NOT_FOUND,
                              absl::StrCat("no route ", Echo(request.method), " ", Echo(request.path)))));
  }
  if (request.method == "POST") {
    // A JSON content type is not one a cross-site form can send without the
    // browser asking first (CORS preflight, never granted here).
    if (!absl::StartsWithIgnoreCase(request.content_type, "application/json")) {
      return answer(Error(Invalid(absl::StrCat("content-type: must be application/json, got ", Echo(request.content_type))),
                   415));
    }
  }
  if (request.method != "GET" && request.sec_fetch_site == "cross-site") {
    return answer(Error(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                              "cross-site requests may not change failoverd (Sec-Fetch-Site: cross-site)")));
  }
  const pb::MethodDescriptor* method = FindMethod(route->rpc);
  if (method == nullptr) return answer(Error(grpc::Status(grpc::StatusCode::INTERNAL, "route without a method")));
  std::unique_ptr<pb::Message> in = NewMessage(method->input_type());
  pb::util::JsonParseOptions parse;
  parse.ignore_unknown_fields = false;
  switch (route->from) {
    case From::kBody: {
      const std::string body = request.body.empty() ? "{}" : request.body;
      const auto parsed = pb::util::JsonStringToMessage(body, in.get(), parse);
      if (!parsed.ok()) {
        return answer(Error(Invalid(absl::StrCat("body: not a valid ", method->input_type()->full_name(), " in JSON: ",
                                          SanitizeUtf8(std::string(parsed.message()), 512)))));
      }
      break;
    }
    case From::kQuery:
      for (const auto& [key, value] : request.query) {
        const grpc::Status s = SetFromQuery(key, value, in.get());
        if (!s.ok()) return answer(Error(s));
      }
      break;
    case From::kPathName: {
      const pb::FieldDescriptor* f = in->GetDescriptor()->FindFieldByName(route->name_field);
      if (!IsValidUtf8(name)) return answer(Error(Invalid("name: is not valid UTF-8")));
      in->GetReflection()->SetString(in.get(), f, name);
      break;
    }
  }
  if (*route->fixed_json != '\0') {
    std::unique_ptr<pb::Message> fixed = NewMessage(method->input_type());
    if (pb::util::JsonStringToMessage(route->fixed_json, fixed.get(), parse).ok()) in->MergeFrom(*fixed);
  }
  Call call;
  if (!in->SerializeToString(&call.request)) return answer(Error(grpc::Status(grpc::StatusCode::INTERNAL, "serialize")));
  call.method = absl::StrCat(IsDecideMethod(route->rpc) ? kDecide : kAdmin, route->rpc);
  call.response_type = method->output_type();
  return call;
}

Response Gateway::Finish(const Call& call, const grpc::Status& status, const std::string& response) {
  if (!status.ok()) return Error(status);
  // Straight from the wire form (MessageToJsonString would parse it into a
  // message only to serialize it again).
  static pb::util::TypeResolver* const resolver =
      pb::util::NewTypeResolverForDescriptorPool(kTypeUrlPrefix, pb::DescriptorPool::generated_pool());
  std::string json;
  const auto printed = pb::util::BinaryToJsonString(
      resolver, absl::StrCat(kTypeUrlPrefix, "/", call.response_type->full_name()), response, &json);
  if (!printed.ok()) {
    return Error(grpc::Status(grpc::StatusCode::INTERNAL, "failoverd's response did not convert to JSON"));
  }
  json.push_back('\n');
  return Json(200, std::move(json));
}

}  // namespace failover::http

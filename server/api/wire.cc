#include "server/api/wire.h"

#include <map>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace failover::api {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

std::string Flatten(const grpc::ByteBuffer& in) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!in.Dump(&slices).ok()) return bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

// Walks the wire format without the UTF-8 check, using the descriptor to know
// which fields are strings and which are nested messages.
std::optional<std::string> FindInvalidUtf8(const Descriptor& type, const std::string& bytes,
                                           const std::string& prefix) {
  UnknownFieldSet fields;
  if (!fields.ParseFromString(bytes)) return std::nullopt;
  std::map<int, int> seen;  // occurrences per field number, for repeated indexes
  for (int i = 0; i < fields.field_count(); ++i) {
    const UnknownField& f = fields.field(i);
    const int index = seen[f.number()]++;
    const FieldDescriptor* field = type.FindFieldByNumber(f.number());
    if (field == nullptr || f.type() != UnknownField::TYPE_LENGTH_DELIMITED) continue;
    std::string path = prefix.empty() ? field->name() : absl::StrCat(prefix, ".", field->name());
    if (field->is_repeated() && !field->is_map()) absl::StrAppend(&path, "[", index, "]");
    if (field->type() == FieldDescriptor::TYPE_STRING &&
        !google::protobuf::internal::IsStructurallyValidUTF8(f.length_delimited())) {
      return path;
    }
    if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
      if (auto found = FindInvalidUtf8(*field->message_type(), f.length_delimited(), path)) return found;
    }
  }
  return std::nullopt;
}

}  // namespace

absl::Status ParseRequest(const grpc::ByteBuffer& in, google::protobuf::Message* out) {
  grpc::ByteBuffer copy(in);  // shares the slices; the reader consumes its own copy
  {
    grpc::ProtoBufferReader reader(&copy);
    if (reader.status().ok() && out->ParseFromZeroCopyStream(&reader)) return absl::OkStatus();
  }
  const std::string bytes = Flatten(in);
  if (auto path = FindInvalidUtf8(*out->GetDescriptor(), bytes, "")) {
    return absl::InvalidArgumentError(absl::StrCat(*path, ": is not valid UTF-8"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("request: is not a valid ", out->GetDescriptor()->full_name(), " message"));
}

absl::Status SerializeMessage(const google::protobuf::Message& message, grpc::ByteBuffer* out) {
  out->Clear();  // the writer below requires an empty buffer
  bool own_buffer = false;
  const grpc::Status s = grpc::SerializationTraits<google::protobuf::Message>::Serialize(message, out, &own_buffer);
  if (!s.ok()) return absl::InternalError(absl::StrCat("response could not be serialized: ", s.error_message()));
  return absl::OkStatus();
}

void NoteLogIndex(const ServiceContext& context, grpc::CallbackServerContext* call) {
  if (call->client_metadata().count(kForwardedHeader) == 0 || !context.leader->IsLeader()) return;
  call->AddTrailingMetadata(kLogIndexTrailer, std::to_string(context.leader->LogIndex()));
}

bool ServeAtLeader(const ServiceContext& context, Role role, const std::string& method,
                   grpc::CallbackServerContext* call, const grpc::ByteBuffer* in, grpc::ByteBuffer* out,
                   grpc::Status* answer) {
  if (context.leader == nullptr || context.leader->IsLeader()) return false;
  const auto started = std::chrono::steady_clock::now();
  grpc::Status status;
  const absl::Status allowed = context.Authorize(*call, role);
  if (!allowed.ok()) {
    status = ToGrpcStatus(allowed);
  } else if (call->client_metadata().count(kForwardedHeader) != 0) {
    // Passed on by a replica that took this one for the leader: leadership is moving.
    status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "this replica is not the cluster's leader (leadership is moving); try again");
  } else {
    status = context.leader->Forward(method, *call, *in, out);
  }
  if (!status.ok() && status.error_code() != grpc::StatusCode::UNAVAILABLE) {
    call->AddTrailingMetadata(kAnsweredTrailer, "1");
  }
  if (context.metrics != nullptr) {
    context.metrics->OnRpc(method.substr(method.rfind('/') + 1), static_cast<int>(status.error_code()),
                           absl::FromChrono(std::chrono::steady_clock::now() - started));
  }
  *answer = status;
  return true;
}

}  // namespace failover::api

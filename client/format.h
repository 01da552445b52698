// Output of failoverctl: aligned tables for people (fit in 80 columns),
// JSON and YAML for scripts (protobuf's canonical JSON mapping, lowerCamelCase
// as the HTTP API answers, defaults included, so the shape is stable).
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "google/protobuf/timestamp.pb.h"

namespace failover::client {

enum class OutputFormat { kTable, kJson, kYaml };

std::string ToJson(const google::protobuf::Message& m, bool multiline = true);
std::string ToYaml(const google::protobuf::Message& m);

// Columns padded to their widest cell; cells longer than `max_cell` are cut with "...".
std::string Table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                  size_t max_cell = 40);

// "3m12s ago", or "-" when unset.
std::string Ago(const google::protobuf::Timestamp& t, absl::Time now);

}  // namespace failover::client

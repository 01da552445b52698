// The status page's files, embedded in the binary (no CDN, nothing fetched
// from elsewhere): index.html, app.js and app.css from server/http/page/.
#pragma once

#include <string_view>
#include <vector>

namespace failover::http {

struct StaticAsset {
  const char* path;  // as served: "/", "/app.js", ...
  std::string_view body;
  const char* content_type;
};

const std::vector<StaticAsset>& StatusPageAssets();

}  // namespace failover::http

// Writes targets and chains back as a config file (the inverse of
// config_file.h): the keys and units a person writes, only the settings that
// differ from the defaults, so `failoverctl get ... -o yaml` can be edited and
// applied again.
#pragma once

#include <string>
#include <vector>

#include "common/model.h"

namespace failover::config {

std::string WriteConfig(const std::vector<TargetConfig>& targets, const std::vector<ChainConfig>& chains);

}  // namespace failover::config

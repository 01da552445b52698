// A small tmpfs for one test's data dir, to fill up at will (a disk that
// refuses writes). Mounting needs root: tests skip when mounted() is false.
#pragma once

#include <sys/mount.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/failoverd_process.h"

namespace failover::testing {

class SmallDisk {
 public:
  explicit SmallDisk(int megabytes) {
    path_ = dir_.path() + "/disk";
    std::filesystem::create_directories(path_);
    const std::string options = "size=" + std::to_string(megabytes) + "m";
    mounted_ = mount("tmpfs", path_.c_str(), "tmpfs", 0, options.c_str()) == 0;
  }
  ~SmallDisk() {
    if (mounted_) umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& path() const { return path_; }
  // Fills the disk until `leave_mib` MiB are free.
  void FillLeaving(int leave_mib) {
    std::ofstream filler(path_ + "/filler", std::ios::binary);
    const std::string chunk(1 << 20, '\0');
    while (std::filesystem::space(path_).available > static_cast<uintmax_t>(leave_mib + 1) << 20) {
      filler.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      filler.flush();
    }
  }
  void Free() { std::filesystem::remove(path_ + "/filler"); }

 private:
  TempDir dir_;
  std::string path_;
  bool mounted_ = false;
};

}  // namespace failover::testing

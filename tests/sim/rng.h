// The simulators' source of randomness: everything a seed draws comes from
// one of these, so the seed alone picks the steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace failover::sim {

class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  uint64_t Next() { return g_(); }
  // Uniform in [0, n).
  size_t Below(size_t n) { return static_cast<size_t>(g_() % n); }
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(g_) < p; }
  template <typename T>
  const T& Pick(const std::vector<T>& v) { return v[Below(v.size())]; }

 private:
  std::mt19937_64 g_;
};

}  // namespace failover::sim

// A value kept once and shared by its copies: a copy costs a pointer, not the
// value. For settings that thousands of objects hold alike (a chain's policy:
// 360 bytes, the same in most chains, held by every chain config and every
// copy of one).
//
// A value type: == compares values, and a write goes through Mutable(), which
// first takes a private copy when the value is shared. A default-constructed
// value, and any value set equal to the default, shares one process-wide
// default. Equal values made apart (decoded one by one) stay apart until
// something interns them (Engine::BuildSnapshot does).
#pragma once

#include <memory>
#include <utility>

namespace failover {

template <class T>
class Shared {
 public:
  Shared() : value_(Default()) {}
  Shared(T value)  // NOLINT: converts as a T member did
      : value_(value == *Default() ? Default() : std::make_shared<const T>(std::move(value))) {}
  // Adopts an existing shared copy (interning); never null.
  explicit Shared(std::shared_ptr<const T> value) : value_(std::move(value)) {}
  // Copied, never moved from: a moved-from value would hold no value at all.
  Shared(const Shared&) = default;
  Shared& operator=(const Shared&) = default;

  const T& operator*() const { return *value_; }
  const T* operator->() const { return value_.get(); }
  operator const T&() const { return *value_; }  // NOLINT: reads as the T it stands for
  const std::shared_ptr<const T>& shared() const { return value_; }

  // The value to change: this object's own copy from now on. The reference
  // stays private only until this object is next copied: write through it
  // at once, not after handing the object on.
  T& Mutable() {
    if (value_.use_count() != 1) value_ = std::make_shared<const T>(*value_);
    return const_cast<T&>(*value_);  // only this object holds it
  }

  bool operator==(const Shared& o) const { return value_ == o.value_ || *value_ == *o.value_; }
  bool operator!=(const Shared& o) const { return !(*this == o); }

 private:
  static const std::shared_ptr<const T>& Default() {
    static const auto* const kDefault = new std::shared_ptr<const T>(std::make_shared<const T>());
    return *kDefault;
  }

  std::shared_ptr<const T> value_;
};

}  // namespace failover

// An optional value kept on the heap: a pointer's size while unset, where a
// std::optional always takes the value's full size. For settings most
// objects leave unset (a target's own health settings: 200 bytes in every one
// of thousands of configs, and in every copy of them).
//
// A value type like std::optional: copies are deep, == compares values.
#pragma once

#include <memory>
#include <optional>
#include <utility>

namespace failover {

template <class T>
class HeapOptional {
 public:
  HeapOptional() = default;
  HeapOptional(std::nullopt_t) {}  // NOLINT: as std::optional converts
  HeapOptional(T value) : value_(std::make_unique<T>(std::move(value))) {}  // NOLINT: as std::optional converts
  HeapOptional(std::optional<T> o)  // NOLINT: what a parser returns
      : value_(o ? std::make_unique<T>(std::move(*o)) : nullptr) {}
  HeapOptional(const HeapOptional& o) : value_(o.value_ ? std::make_unique<T>(*o.value_) : nullptr) {}
  HeapOptional(HeapOptional&&) noexcept = default;
  HeapOptional& operator=(const HeapOptional& o) {
    if (this != &o) value_ = o.value_ ? std::make_unique<T>(*o.value_) : nullptr;
    return *this;
  }
  HeapOptional& operator=(HeapOptional&&) noexcept = default;
  HeapOptional& operator=(std::nullopt_t) {
    value_.reset();
    return *this;
  }

  bool has_value() const { return value_ != nullptr; }
  explicit operator bool() const { return has_value(); }
  const T& operator*() const { return *value_; }
  T& operator*() { return *value_; }
  const T* operator->() const { return value_.get(); }
  T* operator->() { return value_.get(); }
  T value_or(T fallback) const { return value_ ? *value_ : std::move(fallback); }
  void reset() { value_.reset(); }

  bool operator==(const HeapOptional& o) const {
    return has_value() == o.has_value() && (!has_value() || *value_ == *o.value_);
  }
  bool operator!=(const HeapOptional& o) const { return !(*this == o); }

 private:
  std::unique_ptr<T> value_;
};

}  // namespace failover

#pragma once
// A move-only `void()` callable for the engine's events and completions. A closure of up to
// kInlineBytes (every closure the engine and the executor make: a pointer and one or two 32-bit
// indices) is stored inside the object, so scheduling an event allocates nothing; a larger one (a
// std::function, say) is kept on the heap. A trivially copyable closure (pointers and indices) moves as
// plain bytes, which is what the event queue's buckets do most.
#include <cstddef>
#include <cstring>
#include <functional>
#include <new>
#include <type_traits>
#include <utility>

namespace offsim::sim {

class Callback {
 public:
  // 16 bytes: a Callback is 24 bytes and an event queue entry (time and callback) 32, half a
  // cache line; the queue moves each entry a few times (sim/core/simulator.hpp).
  static constexpr std::size_t kInlineBytes = 16;

  Callback() noexcept = default;
  Callback(std::nullptr_t) noexcept {}  // NOLINT(google-explicit-constructor): an empty completion

  template <typename F>
  requires(!std::is_same_v<std::decay_t<F>, Callback> && std::is_invocable_r_v<void, std::decay_t<F>&>)
      Callback(F&& f) {  // NOLINT(google-explicit-constructor): lambdas convert as they do to std::function
    using T = std::decay_t<F>;
    if constexpr (is_std_function<T>::value) {
      if (!f) return;  // an empty std::function stays empty
    }
    if constexpr (fits_inline<T>()) {
      ::new (static_cast<void*>(storage_)) T(std::forward<F>(f));
      ops_ = &kInlineOps<T>;
    } else {
      *reinterpret_cast<T**>(storage_) = new T(std::forward<F>(f));
      ops_ = &kHeapOps<T>;
    }
  }

  Callback(Callback&& other) noexcept : ops_(other.ops_) { take(other); }
  Callback& operator=(Callback&& other) noexcept {
    if (this != &other) {
      reset();
      ops_ = other.ops_;
      take(other);
    }
    return *this;
  }
  Callback(const Callback&) = delete;
  Callback& operator=(const Callback&) = delete;
  ~Callback() { reset(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }
  void operator()() { ops_->invoke(storage_); }

 private:
  template <typename T>
  struct is_std_function : std::false_type {};
  template <typename R, typename... A>
  struct is_std_function<std::function<R(A...)>> : std::true_type {};

  struct Ops {
    void (*invoke)(void*);
    void (*relocate)(void* to, void* from);  // move-constructs at `to` and destroys `from`
    void (*destroy)(void*);
    bool bytes;  // relocates as a copy of its bytes and needs no destruction
  };
  template <typename T>
  static constexpr bool fits_inline() {
    return sizeof(T) <= kInlineBytes && alignof(T) <= alignof(void*) && std::is_nothrow_move_constructible_v<T>;
  }
  template <typename T>
  static constexpr Ops kInlineOps{[](void* p) { (*static_cast<T*>(p))(); },
                                  [](void* to, void* from) {
                                    ::new (to) T(std::move(*static_cast<T*>(from)));
                                    static_cast<T*>(from)->~T();
                                  },
                                  [](void* p) { static_cast<T*>(p)->~T(); }, std::is_trivially_copyable_v<T>};
  template <typename T>
  static constexpr Ops kHeapOps{[](void* p) { (**static_cast<T**>(p))(); },
                                [](void* to, void* from) { *static_cast<T**>(to) = *static_cast<T**>(from); },
                                [](void* p) { delete *static_cast<T**>(p); }, false};

  void take(Callback& other) noexcept {
    if (ops_ == nullptr) return;
    if (ops_->bytes) {
      std::memcpy(storage_, other.storage_, kInlineBytes);
    } else {
      ops_->relocate(storage_, other.storage_);
    }
    other.ops_ = nullptr;
  }

  void reset() noexcept {
    if (ops_ != nullptr) {
      if (!ops_->bytes) ops_->destroy(storage_);
      ops_ = nullptr;
    }
  }

  alignas(void*) unsigned char storage_[kInlineBytes];
  const Ops* ops_ = nullptr;
};

}  // namespace offsim::sim

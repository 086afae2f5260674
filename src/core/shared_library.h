// C libraries that only some commands need, opened with dlopen on their first use instead of at process start.
//
// A process that links a library loads it, and everything it depends on, before main: libcurl alone brings ~30
// libraries (TLS, Kerberos, LDAP, IDN, ...), cairo ~15 (X11, fontconfig, freetype, ...), Open MPI ~7, so a
// `tfm encode` of one sentence spent about a third of its time in the dynamic loader for downloads, plots and MPI
// it never makes. A file that calls such a library declares each function it uses as a LazyFunction of the same
// name (TFM_LAZY_FUNCTION): calls read as before, the library is opened on the first call, and a missing library
// is one clear std::runtime_error naming it and what needed it, not a failure to start.
//
// The functions keep their declarations from the library's own header (types, constants and signatures come from
// there), but nothing references the library's symbols at link time: a LazyFunction is an object, so unqualified
// calls inside the declaring namespace find it before the header's global function (and, being an object, it
// stops argument-dependent lookup from adding the global one back).
#pragma once
#include <atomic>
#include <mutex>
#include <string>
#include <type_traits>

namespace tfm {

class SharedLibrary {
 public:
  // soname: the file dlopen looks up, e.g. "libcurl.so.4" (the build passes the SONAME of the library it compiled
  // against); needed_for: what uses it, for the error message ("downloads"). global: RTLD_GLOBAL, for a library
  // whose own plug-ins resolve its symbols (Open MPI's components).
  SharedLibrary(const char* soname, const char* needed_for, bool global = false)
      : soname_(soname), needed_for_(needed_for), global_(global) {}
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  // The address of the library's symbol `name` (a function or an object), opening the library first (once, on the
  // first call from any thread). Throws std::runtime_error "libcurl.so.4 (needed for downloads) could not be
  // loaded: <dlerror>; install it ..." or "libcurl.so.4 (needed for downloads) has no symbol 'name'".
  void* symbol(const char* name) const;
  // Whether the library can be opened (opens it); symbol() then does not throw for that reason.
  bool available() const;
  const char* soname() const { return soname_; }

 private:
  void* handle() const;  // null after a failed open, error_ says why
  const char* soname_;
  const char* needed_for_;
  bool global_;
  mutable std::once_flag once_;
  mutable void* handle_ = nullptr;
  mutable std::string error_;
};

// A function of a SharedLibrary, resolved on its first call. F: the function's type, decltype(::name) of the
// header's declaration; C variadic functions (curl_easy_setopt) are supported.
template <class F>
class LazyFunction;

// The resolve-once cache both LazyFunction forms share: the symbol looked up on first use, then kept.
template <class P>
class LazySymbol {
 public:
  using Pointer = P;
  LazySymbol(const SharedLibrary& lib, const char* name) : lib_(lib), name_(name) {}
  // The resolved function (throws as SharedLibrary::symbol does).
  Pointer get() const {
    Pointer f = fn_.load(std::memory_order_acquire);
    if (!f) {
      f = reinterpret_cast<Pointer>(lib_.symbol(name_));
      fn_.store(f, std::memory_order_release);
    }
    return f;
  }

 private:
  const SharedLibrary& lib_;
  const char* name_;
  mutable std::atomic<Pointer> fn_{nullptr};
};

template <class R, class... A>
class LazyFunction<R(A...)> : public LazySymbol<R (*)(A...)> {
 public:
  using LazySymbol<R (*)(A...)>::LazySymbol;
  R operator()(A... args) const { return this->get()(args...); }
};

template <class R, class... A>
class LazyFunction<R(A..., ...)> : public LazySymbol<R (*)(A..., ...)> {
 public:
  using LazySymbol<R (*)(A..., ...)>::LazySymbol;
  template <class... V>
  R operator()(A... args, V... varargs) const {
    return this->get()(args..., varargs...);
  }
};

// C headers declare some functions noexcept (glibc's __THROW); they resolve the same way.
template <class R, class... A>
class LazyFunction<R(A...) noexcept> : public LazyFunction<R(A...)> {
 public:
  using LazyFunction<R(A...)>::LazyFunction;
};
template <class R, class... A>
class LazyFunction<R(A..., ...) noexcept> : public LazyFunction<R(A..., ...)> {
 public:
  using LazyFunction<R(A..., ...)>::LazyFunction;
};

namespace detail {
// The plain function type of a function pointer, rebuilt from its return and parameter types: without the
// attributes a C header may attach to the declaration (glibc's nonnull), which GCC would drop from a template
// argument with -Wignored-attributes.
template <class R, class... A>
R (*plain_function(R (*)(A...)))(A...);
template <class R, class... A>
R (*plain_function(R (*)(A..., ...)))(A..., ...);
template <class R, class... A>
R (*plain_function(R (*)(A...) noexcept))(A...) noexcept;
template <class R, class... A>
R (*plain_function(R (*)(A..., ...) noexcept))(A..., ...) noexcept;
}  // namespace detail

}  // namespace tfm

// Declares `name` (a function declared by an included C header, at global scope) as a LazyFunction of `lib`, in
// the current namespace: `TFM_LAZY_FUNCTION(curl_library(), curl_easy_init);`. In a header, put `inline` before.
#define TFM_LAZY_FUNCTION(lib, name) \
  const ::tfm::LazyFunction<std::remove_pointer_t<decltype(::tfm::detail::plain_function(&::name))>> name{lib, #name}

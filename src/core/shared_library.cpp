#include "core/shared_library.h"

#include <dlfcn.h>

#include <stdexcept>

namespace tfm {

void* SharedLibrary::handle() const {
  std::call_once(once_, [this] {
    dlerror();
    handle_ = dlopen(soname_, RTLD_NOW | (global_ ? RTLD_GLOBAL : RTLD_LOCAL));
    if (!handle_) {
      const char* why = dlerror();
      error_ = why ? why : "unknown dlopen error";
    }
  });
  return handle_;
}

bool SharedLibrary::available() const { return handle() != nullptr; }

void* SharedLibrary::symbol(const char* name) const {
  void* h = handle();
  if (!h)
    throw std::runtime_error(std::string(soname_) + " (needed for " + needed_for_ + ") could not be loaded: " +
                             error_ + "; install it (scripts/install-deps.sh) or set LD_LIBRARY_PATH");
  dlerror();
  void* s = dlsym(h, name);
  if (!s)
    throw std::runtime_error(std::string(soname_) + " (needed for " + needed_for_ + ") has no symbol '" + name +
                             "'");
  return s;
}

}  // namespace tfm

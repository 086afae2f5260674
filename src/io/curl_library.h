// libcurl for downloads (tfm download, the Hugging Face Hub client), opened on first use (core/shared_library.h):
// a process that never downloads does not load it and its ~30 dependencies. Include this instead of
// <curl/curl.h>; code in namespace tfm (and namespaces inside it) then calls the functions below as usual.
#pragma once
// curl.h's type-checking wrappers are macros named like the functions; the LazyFunction objects take their place.
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "core/shared_library.h"

namespace tfm {

// TFM_CURL_SONAME: the SONAME of the libcurl the build compiled against (CMakeLists.txt).
inline const SharedLibrary& curl_library() {
  static const SharedLibrary lib(TFM_CURL_SONAME, "downloads");
  return lib;
}

inline TFM_LAZY_FUNCTION(curl_library(), curl_global_init);
inline TFM_LAZY_FUNCTION(curl_library(), curl_easy_init);
inline TFM_LAZY_FUNCTION(curl_library(), curl_easy_setopt);
inline TFM_LAZY_FUNCTION(curl_library(), curl_easy_perform);
inline TFM_LAZY_FUNCTION(curl_library(), curl_easy_getinfo);
inline TFM_LAZY_FUNCTION(curl_library(), curl_easy_strerror);
inline TFM_LAZY_FUNCTION(curl_library(), curl_easy_cleanup);
inline TFM_LAZY_FUNCTION(curl_library(), curl_slist_append);
inline TFM_LAZY_FUNCTION(curl_library(), curl_slist_free_all);

// curl_global_init, once per process (throws std::runtime_error when it fails or libcurl cannot be loaded).
inline void curl_init_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
    if (rc != CURLE_OK) throw std::runtime_error(std::string("libcurl: global init failed: ") + curl_easy_strerror(rc));
  });
}

struct CurlFree {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
// An easy handle (curl_init_once first); throws std::runtime_error when libcurl cannot make one.
inline std::unique_ptr<CURL, CurlFree> curl_easy_handle() {
  curl_init_once();
  std::unique_ptr<CURL, CurlFree> curl(curl_easy_init());
  if (!curl) throw std::runtime_error("libcurl: curl_easy_init failed");
  return curl;
}

}  // namespace tfm

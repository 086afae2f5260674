// Small text helpers shared by progress reports.
#pragma once
#include <cmath>
#include <cstdio>
#include <string>

namespace tfm {
// "1h05m" or "3m07s" for a duration in seconds (ETA displays).
inline std::string format_duration(double s) {
  char buf[32];
  if (!(s >= 0)) s = 0;
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%dh%02dm", (int)(s / 3600), (int)std::fmod(s / 60, 60));
  else
    std::snprintf(buf, sizeof buf, "%dm%02ds", (int)(s / 60), (int)std::fmod(s, 60));
  return buf;
}
}  // namespace tfm

#include "core/rng.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace tfm {

float Rng::normal() {
  float u1 = uniform(), u2 = uniform();
  if (u1 < 1e-12f) u1 = 1e-12f;
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530717958647692f * u2);
}

std::string Rng::state() const {
  std::ostringstream os;
  os << gen_;
  return os.str();
}

void Rng::set_state(const std::string& s) {
  std::istringstream is(s);
  is >> gen_;
  if (is.fail()) throw std::invalid_argument("corrupt RNG state");
}

}  // namespace tfm

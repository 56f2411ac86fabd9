// LrSchedule: spec parsing and the torch closed forms of Note [Learning-rate formulas].
#include "runtime/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "common/error.h"

namespace omt {
namespace {

const char* const kValidForms =
    "valid forms: constant | step:EVERY:GAMMA (multiply by GAMMA every EVERY epochs, e.g. "
    "step:10:0.1) | cosine | cosine:MIN_LR (e.g. cosine:1e-5) | linear | linear:MIN_LR; append ,warmup:N for a linear "
    "warm-up over the first N steps (e.g. cosine,warmup:500)";

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(*out);
}

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtoll(s.c_str(), &end, 10);
  return end == s.c_str() + s.size();
}

[[noreturn]] void bad_spec(const std::string& spec, const std::string& why) {
  OMT_FAIL(kInvalidArgument, "learning-rate schedule '", spec, "': ", why, "; ", kValidForms);
}

// The shortest decimal that reads back as the same float ("0.1", not "0.100000001").
std::string float_str(float v) {
  for (int precision = 6; precision < 9; ++precision) {
    std::ostringstream os;
    os.precision(precision);
    os << v;
    if (std::strtof(os.str().c_str(), nullptr) == v) return os.str();
  }
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

}  // namespace

LrSchedule LrSchedule::parse(const std::string& spec, float base_lr, int64_t warmup_steps) {
  OMT_CHECK(std::isfinite(base_lr) && base_lr > 0.f, kInvalidArgument,
            "the learning rate must be a positive number, got ", base_lr);
  OMT_CHECK(warmup_steps >= 0, kInvalidArgument, "warm-up steps must be >= 0, got ",
            warmup_steps);
  LrSchedule s;
  s.base_lr = base_lr;
  s.warmup_steps = warmup_steps;

  const std::vector<std::string> clauses = split(spec, ',');
  for (size_t i = 1; i < clauses.size(); ++i) {
    const std::vector<std::string> kv = split(clauses[i], ':');
    int64_t n = 0;
    if (kv.size() != 2 || kv[0] != "warmup" || !parse_int(kv[1], &n))
      bad_spec(spec, "cannot read '" + clauses[i] + "'");
    if (n < 0) bad_spec(spec, "warm-up steps must be >= 0");
    if (warmup_steps != 0) bad_spec(spec, "warm-up is given both in the spec and separately");
    s.warmup_steps = n;
  }

  const std::vector<std::string> f = split(clauses[0], ':');
  if (f[0] == "constant" && f.size() == 1) {
    s.kind = Kind::kConstant;
  } else if (f[0] == "step" && f.size() == 3) {
    s.kind = Kind::kStep;
    double gamma = 0;
    if (!parse_int(f[1], &s.step_every) || s.step_every <= 0)
      bad_spec(spec, "EVERY must be a positive whole number of epochs, got '" + f[1] + "'");
    if (!parse_double(f[2], &gamma) || gamma <= 0)
      bad_spec(spec, "GAMMA must be a positive number, got '" + f[2] + "'");
    s.gamma = static_cast<float>(gamma);
  } else if ((f[0] == "cosine" || f[0] == "linear") && f.size() <= 2) {
    s.kind = f[0] == "cosine" ? Kind::kCosine : Kind::kLinear;
    if (f.size() == 2) {
      double min_lr = 0;
      if (!parse_double(f[1], &min_lr) || min_lr < 0 || min_lr > base_lr)
        bad_spec(spec, str_cat("MIN_LR must be a number in [0, lr = ", base_lr, "], got '",
                               f[1], "'"));
      s.min_lr = static_cast<float>(min_lr);
    }
  } else {
    bad_spec(spec, "unknown or malformed schedule '" + clauses[0] + "'");
  }
  return s;
}

float LrSchedule::lr_at(int64_t step, int64_t epoch, int64_t steps_per_epoch,
                        int64_t total_steps) const {
  OMT_CHECK(step >= 0 && epoch >= 0, kInvalidArgument, "learning rate asked for step ", step,
            ", epoch ", epoch, "; both must be >= 0");
  OMT_CHECK(steps_per_epoch > 0, kInvalidArgument, "steps per epoch must be positive, got ",
            steps_per_epoch);
  // double throughout, rounded once, so the rate does not depend on the order of float ops.
  double lr = base_lr;
  switch (kind) {
    case Kind::kConstant:
      break;
    case Kind::kStep:
      lr = base_lr * std::pow(static_cast<double>(gamma), static_cast<double>(epoch / step_every));
      break;
    case Kind::kCosine: {
      OMT_CHECK(total_steps > 0, kInvalidArgument,
                "a cosine schedule needs the run's total number of steps, got ", total_steps);
      const double t = static_cast<double>(std::min(step, total_steps));
      const double kPi = 3.14159265358979323846;
      lr = min_lr + (static_cast<double>(base_lr) - min_lr) *
                        (1.0 + std::cos(kPi * t / static_cast<double>(total_steps))) / 2.0;
      break;
    }
    case Kind::kLinear: {
      OMT_CHECK(total_steps > 0, kInvalidArgument,
                "a linear schedule needs the run's total number of steps, got ", total_steps);
      const double t = static_cast<double>(std::min(step, total_steps));
      lr = min_lr + (static_cast<double>(base_lr) - min_lr) * (1.0 - t / static_cast<double>(total_steps));
      break;
    }
  }
  if (warmup_steps > 0) {
    const double w = static_cast<double>(warmup_steps);
    const double start = 1.0 / w;
    lr *= start + (1.0 - start) * static_cast<double>(std::min(step, warmup_steps)) / w;
  }
  return static_cast<float>(lr);
}

std::string LrSchedule::str() const {
  std::ostringstream os;
  switch (kind) {
    case Kind::kConstant:
      os << "constant";
      break;
    case Kind::kStep:
      os << "step:" << step_every << ":" << float_str(gamma);
      break;
    case Kind::kCosine:
    case Kind::kLinear:
      os << (kind == Kind::kCosine ? "cosine" : "linear");
      if (min_lr != 0.f) os << ":" << float_str(min_lr);
      break;
  }
  if (warmup_steps > 0) os << ",warmup:" << warmup_steps;
  return os.str();
}

}  // namespace omt

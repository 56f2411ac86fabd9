// Learning-rate schedules parsed from a spec string ("constant", "step:EVERY:GAMMA",
// "cosine", "cosine:MIN_LR", "linear", "linear:MIN_LR", each with an optional ",warmup:N"). lr_at is a pure function of
// the position, so a resumed run gets exactly the rate an uninterrupted one would have had.
#pragma once

#include <cstdint>
#include <string>

namespace omt {

// Note [Learning-rate formulas]: the closed forms of torch.optim.lr_scheduler, with `step`
// the 0-based index of the update about to be applied and `epoch` its 0-based epoch.
//   constant:        lr
//   step:E:G         lr * G^floor(epoch / E)                      (StepLR, stepped per epoch)
//   cosine[:MIN]     MIN + (lr - MIN) * (1 + cos(pi * t / T)) / 2  (CosineAnnealingLR, stepped
//                    per update, T = total_steps, t = min(step, T); MIN defaults to 0)
//   linear[:MIN]     MIN + (lr - MIN) * (1 - t / T)                  (LinearLR to MIN, stepped per
//                    update; with warm-up, Hugging Face's linear schedule's shape)
//   warm-up W        the above times f = 1/W + (1 - 1/W) * min(step, W) / W
//                    (LinearLR(start_factor=1/W, end_factor=1, total_iters=W) chained in front,
//                    as ChainedScheduler composes them: lr/W at step 0, full lr from step W)
struct LrSchedule {
  enum class Kind { kConstant, kStep, kCosine, kLinear };

  Kind kind = Kind::kConstant;
  float base_lr = 0.f;
  int64_t step_every = 0;  // epochs between decays (kStep)
  float gamma = 1.f;       // decay factor (kStep)
  float min_lr = 0.f;      // floor (kCosine, kLinear)
  int64_t warmup_steps = 0;

  // Parses `spec` for a run whose base rate is `base_lr`. Warm-up comes from ",warmup:N" in the
  // spec or from `warmup_steps` (not both). kInvalidArgument listing the valid forms when the
  // spec is malformed, and naming the value when a number is out of range.
  static LrSchedule parse(const std::string& spec, float base_lr, int64_t warmup_steps = 0);

  // The rate for update `step` (>= 0) in `epoch` (>= 0). `steps_per_epoch` must be positive;
  // `total_steps` (the whole run's updates) must be positive for cosine. Beyond total_steps a
  // cosine schedule stays at its floor.
  float lr_at(int64_t step, int64_t epoch, int64_t steps_per_epoch, int64_t total_steps) const;

  // The canonical spec ("step:10:0.1,warmup:500"); parse(str(), base_lr) gives this schedule.
  std::string str() const;
};

}  // namespace omt

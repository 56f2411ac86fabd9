// Learning-rate schedules against the closed forms of torch.optim.lr_scheduler (values
// computed from the formulas quoted next to each case), spec parsing and its errors.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/lr_schedule.h"
#include "common/error.h"

namespace omt {
namespace {

constexpr int64_t kSpe = 10;  // steps per epoch used throughout

TEST(LrSchedule, ConstantIsTheBaseRate) {
  const LrSchedule s = LrSchedule::parse("constant", 0.1f);
  for (int64_t step : {0, 1, 99, 12345}) EXPECT_FLOAT_EQ(s.lr_at(step, step / kSpe, kSpe, 100), 0.1f);
}

TEST(LrSchedule, StepMatchesTorchStepLR) {
  // StepLR(step_size=3, gamma=0.5), scheduler.step() per epoch: lr = 0.1 * 0.5 ** (epoch // 3).
  const LrSchedule s = LrSchedule::parse("step:3:0.5", 0.1f);
  const float want[] = {0.1f, 0.1f, 0.1f, 0.05f, 0.05f, 0.05f, 0.025f, 0.025f, 0.025f, 0.0125f};
  for (int64_t epoch = 0; epoch < 10; ++epoch)
    EXPECT_FLOAT_EQ(s.lr_at(epoch * kSpe + 4, epoch, kSpe, 100), want[epoch]) << epoch;
}

TEST(LrSchedule, CosineMatchesTorchCosineAnnealingLR) {
  // CosineAnnealingLR(T_max=10, eta_min=0): 0.1 * (1 + cos(pi * t / 10)) / 2.
  const LrSchedule s = LrSchedule::parse("cosine", 0.1f);
  EXPECT_FLOAT_EQ(s.lr_at(0, 0, kSpe, 10), 0.1f);
  EXPECT_FLOAT_EQ(s.lr_at(1, 0, kSpe, 10), 0.09755282581475769f);
  EXPECT_FLOAT_EQ(s.lr_at(5, 0, kSpe, 10), 0.05f);
  EXPECT_FLOAT_EQ(s.lr_at(7, 0, kSpe, 10), 0.02061073738537635f);
  EXPECT_NEAR(s.lr_at(10, 1, kSpe, 10), 0.f, 1e-9);
  EXPECT_NEAR(s.lr_at(15, 1, kSpe, 10), 0.f, 1e-9);  // past the end it stays at the floor
}

TEST(LrSchedule, CosineWithFloorMatchesTorchEtaMin) {
  // CosineAnnealingLR(T_max=100, eta_min=0.001): 0.001 + 0.099 * (1 + cos(pi * t / 100)) / 2.
  const LrSchedule s = LrSchedule::parse("cosine:0.001", 0.1f);
  EXPECT_FLOAT_EQ(s.lr_at(25, 2, kSpe, 100), 0.0855017856687341f);
  EXPECT_FLOAT_EQ(s.lr_at(90, 9, kSpe, 100), 0.0034227024433899004f);
  EXPECT_FLOAT_EQ(s.lr_at(100, 10, kSpe, 100), 0.001f);
}

TEST(LrSchedule, WarmupMatchesTorchLinearLR) {
  // LinearLR(start_factor=1/4, end_factor=1, total_iters=4): 0.1 * (0.25 + 0.75 * min(t,4) / 4).
  const LrSchedule s = LrSchedule::parse("constant", 0.1f, 4);
  const float want[] = {0.025f, 0.04375f, 0.0625f, 0.08125f, 0.1f, 0.1f};
  for (int64_t step = 0; step < 6; ++step)
    EXPECT_FLOAT_EQ(s.lr_at(step, 0, kSpe, 100), want[step]) << step;
}

TEST(LrSchedule, WarmupChainsWithCosine) {
  // ChainedScheduler([LinearLR(1/4, 1, 4), CosineAnnealingLR(T_max=20)]) at t=2:
  // (0.25 + 0.75 * 2/4) * 0.1 * (1 + cos(pi * 2/20)) / 2.
  const LrSchedule a = LrSchedule::parse("cosine,warmup:4", 0.1f);
  const LrSchedule b = LrSchedule::parse("cosine", 0.1f, 4);
  EXPECT_FLOAT_EQ(a.lr_at(2, 0, kSpe, 20), 0.06097051613422355f);
  EXPECT_FLOAT_EQ(b.lr_at(2, 0, kSpe, 20), 0.06097051613422355f);
}

TEST(LrSchedule, LinearDecaysToItsFloorAsTorchLinearLR) {
  // LinearLR(start_factor=1, end_factor=0, total_iters=100): 0.1 * (1 - t / 100); with a floor,
  // 0.001 + 0.099 * (1 - t / 100).
  const LrSchedule s = LrSchedule::parse("linear", 0.1f);
  EXPECT_FLOAT_EQ(s.lr_at(0, 0, kSpe, 100), 0.1f);
  EXPECT_FLOAT_EQ(s.lr_at(25, 2, kSpe, 100), 0.075f);
  EXPECT_FLOAT_EQ(s.lr_at(100, 10, kSpe, 100), 0.0f);
  EXPECT_FLOAT_EQ(s.lr_at(150, 15, kSpe, 100), 0.0f);
  const LrSchedule floor = LrSchedule::parse("linear:0.001", 0.1f);
  EXPECT_FLOAT_EQ(floor.lr_at(50, 5, kSpe, 100), 0.0505f);
}

TEST(LrSchedule, StrRoundTrips) {
  for (const char* spec : {"constant", "step:10:0.1", "cosine", "cosine:1e-05", "cosine,warmup:500", "linear",
                           "linear:0.001,warmup:10",
                           "step:2:0.5,warmup:3"}) {
    const LrSchedule s = LrSchedule::parse(spec, 0.1f);
    EXPECT_EQ(s.str(), spec);
    const LrSchedule back = LrSchedule::parse(s.str(), 0.1f);
    EXPECT_EQ(back.kind, s.kind);
    EXPECT_EQ(back.warmup_steps, s.warmup_steps);
    EXPECT_FLOAT_EQ(back.lr_at(37, 3, kSpe, 100), s.lr_at(37, 3, kSpe, 100));
  }
}

TEST(LrSchedule, BadSpecsListTheValidForms) {
  for (const char* spec : {"", "linear:abc", "exponential", "step", "step:0:0.1", "step:10", "step:x:0.1",
                           "step:10:-1", "cosine:abc", "cosine:0.5", "cosine:1:2", "constant:1",
                           "cosine,warmup", "cosine,warmup:-1", "cosine,cooldown:3"}) {
    try {
      LrSchedule::parse(spec, 0.1f);
      ADD_FAILURE() << "accepted '" << spec << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << spec;
      const std::string msg = e.what();
      EXPECT_NE(msg.find("valid forms: constant | step:EVERY:GAMMA"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("'") + spec + "'"), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(LrSchedule::parse("cosine,warmup:3", 0.1f, 5), Error);  // given twice
  EXPECT_THROW(LrSchedule::parse("constant", 0.f), Error);
  EXPECT_THROW(LrSchedule::parse("cosine", 0.1f).lr_at(0, 0, kSpe, 0), Error);
}

}  // namespace
}  // namespace omt

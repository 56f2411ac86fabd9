// fit's output files (Note [Outputs checked before step 1], Note [Late outputs]): a path
// that cannot be written fails before step 1; one that fails after training still leaves the
// trained model written, the other files written, and a kIo error naming what failed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <streambuf>

#include "graph/onnx_io.h"
#include "runtime/checkpoint.h"
#include "runtime/fit.h"
#include "tests/regression_util.h"
#include "tests/test_util.h"

namespace omt {
namespace {

namespace fs = std::filesystem;

Dataset linear_dataset() {
  const test::LinearData d = test::linear_data(64, 3);
  Dataset out;
  out.source = "linear";
  out.label_name = "y";
  out.features.set("input", d.x);
  out.labels = d.y;
  return out;
}

FitOptions linear_options() {
  FitOptions o;
  o.spec.loss = LossKind::kMse;
  o.epochs = 2;
  o.global_batch = 16;
  o.lr = 0.05f;
  return o;
}

std::shared_ptr<const Model> linear() { return std::make_shared<const Model>(test::linear_model()); }

TEST(FitOutputs, UnwritablePathsFailBeforeStep1) {
  test::TempDir dir;
  const std::string missing = dir.file("no-such-folder/");
  const std::vector<std::pair<std::string, std::function<void(FitOptions&)>>> cases = {
      {"--output", [&](FitOptions& o) { o.output_path = missing + "trained.onnx"; }},
      {"--metrics", [&](FitOptions& o) { o.metrics_path = missing + "run.jsonl"; }},
      {"--report", [&](FitOptions& o) { o.report_path = missing + "report.html"; }},
      {"--trace", [&](FitOptions& o) {
         o.trace_path = missing + "trace.json";
         o.mirror.trace = true;
       }},
      {"--checkpoint-dir", [&](FitOptions& o) { o.checkpoint_dir = "/proc/omt-checkpoints"; }},
  };
  for (const auto& [option, set] : cases) {
    FitOptions o = linear_options();
    set(o);
    std::ostringstream log;
    try {
      fit(linear(), linear_dataset(), nullptr, o, log);
      ADD_FAILURE() << option << ": fit ran";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kIo) << e.what();
      EXPECT_NE(std::string(e.what()).find(option), std::string::npos) << e.what();
    }
    EXPECT_EQ(log.str().find("epoch 1/"), std::string::npos) << option << ": trained before failing:\n" << log.str();
  }
}

// A log that runs `act` once, when a line containing `trigger` has been written: it makes an
// output fail between the trained model's write and the writes after it.
class TriggerLog : public std::stringbuf {
 public:
  TriggerLog(std::string trigger, std::function<void()> act) : trigger_(std::move(trigger)), act_(std::move(act)) {}
  int sync() override {
    if (act_ && str().find(trigger_) != std::string::npos) {
      act_();
      act_ = nullptr;
    }
    return 0;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const std::streamsize done = std::stringbuf::xsputn(s, n);
    sync();
    return done;
  }

 private:
  std::string trigger_;
  std::function<void()> act_;
};

TEST(FitOutputs, LateFailureKeepsTheTrainedModel) {
  test::TempDir dir;
  const std::string later = dir.file("later");
  fs::create_directory(later);
  FitOptions o = linear_options();
  o.output_path = dir.file("trained.onnx");
  o.checkpoint_dir = dir.file("ckpt");
  o.metrics_path = dir.file("run.jsonl");
  o.report_path = later + "/report.html";  // its folder goes away once the model is written
  o.trace_path = later + "/trace.json";
  o.mirror.trace = true;
  TriggerLog buf("wrote " + o.output_path, [&] { fs::remove_all(later); });
  std::ostream log(&buf);
  try {
    fit(linear(), linear_dataset(), nullptr, o, log);
    ADD_FAILURE() << "no error for the lost report folder";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kIo) << msg;
    EXPECT_NE(msg.find("2 output(s)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--report"), std::string::npos) << msg;
    EXPECT_NE(msg.find("trace.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Written: " + o.output_path), std::string::npos) << msg;
  }
  // The model is there and trained (not the zero initial weights), and so is the rest.
  const Model trained = load_onnx(o.output_path);
  const Tensor& w = trained.graph.initializers.at("fc.weight");
  double sum = 0;
  for (int64_t i = 0; i < w.numel(); ++i) sum += std::abs(w.value_as_double(i));
  EXPECT_GT(sum, 0.01);
  EXPECT_TRUE(fs::exists(o.checkpoint_dir + "/latest"));
  EXPECT_EQ(load_checkpoint(o.checkpoint_dir).meta.at("optimizer"), optimizer_kind_name(o.spec.optimizer.kind))
      << "Note [Optimizer in checkpoints]: the optimizer's name";
  std::ifstream metrics(o.metrics_path);
  std::string line, last;
  while (std::getline(metrics, line)) last = line;
  EXPECT_NE(last.find("\"summary\""), std::string::npos) << last;
  EXPECT_NE(buf.str().find("warning: "), std::string::npos) << buf.str();
}

}  // namespace
}  // namespace omt

// Metrics and report: confusion-matrix numbers checked against hand computation (sklearn
// conventions), merging, label errors, --metrics JSON lines, the HTML report, progress bar.
// OMT_REPORT_SAMPLE=/path.html keeps a copy of the sample report for a look in a browser.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/file_util.h"
#include "runtime/metrics.h"
#include "runtime/report.h"
#include "tests/test_util.h"

namespace omt {
namespace {

// 4 classes, 10 samples; class 3 is never predicted. Rows = true class:
//   [2 1 0 0]   [1 2 0 0]   [0 1 1 0]   [1 0 1 0]
// One row of logits ties classes 0 and 1 (arg-max takes the first).
Tensor example_logits() {
  const std::vector<int64_t> predicted = {0, 0, 1, 1, 1, 0, 2, 1, 2, 0};
  std::vector<float> v(predicted.size() * 4, -1.0f);
  for (size_t i = 0; i < predicted.size(); ++i) v[i * 4 + predicted[i]] = 2.0f + 0.1f * i;
  v[1 * 4 + 0] = 1.0f, v[1 * 4 + 1] = 1.0f;  // tie -> class 0
  return Tensor::from_vector<float>(v, {10, 4});
}
Tensor example_labels() {
  return Tensor::from_vector<int64_t>({0, 0, 0, 1, 1, 1, 2, 2, 3, 3}, {10});
}

TEST(ConfusionMatrix, HandComputedExample) {
  ConfusionMatrix cm(4);
  cm.add(example_logits(), example_labels());
  const int64_t want[4][4] = {{2, 1, 0, 0}, {1, 2, 0, 0}, {0, 1, 1, 0}, {1, 0, 1, 0}};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(cm.counts(i, j), want[i][j]) << i << "," << j;
  EXPECT_EQ(cm.total(), 10);
  EXPECT_DOUBLE_EQ(cm.accuracy(), 0.5);
  EXPECT_EQ(cm.support(0), 3);
  EXPECT_EQ(cm.support(3), 2);
  EXPECT_EQ(cm.predicted_count(3), 0);

  const double p[4] = {0.5, 0.5, 0.5, 0.0};
  const double r[4] = {2.0 / 3, 2.0 / 3, 0.5, 0.0};
  const double f[4] = {4.0 / 7, 4.0 / 7, 0.5, 0.0};
  for (int c = 0; c < 4; ++c) {
    EXPECT_NEAR(cm.precision(c), p[c], 1e-12) << c;
    EXPECT_NEAR(cm.recall(c), r[c], 1e-12) << c;
    EXPECT_NEAR(cm.f1(c), f[c], 1e-12) << c;
  }
  // Never predicted: precision 0, not NaN (sklearn zero_division=0).
  EXPECT_FALSE(std::isnan(cm.precision(3)));
  EXPECT_NEAR(cm.macro_precision(), 0.375, 1e-12);
  EXPECT_NEAR(cm.macro_recall(), 11.0 / 24, 1e-12);
  EXPECT_NEAR(cm.macro_f1(), 23.0 / 56, 1e-12);
  EXPECT_NEAR(cm.weighted_recall(), 0.5, 1e-12);  // weighted recall == accuracy
  EXPECT_NEAR(cm.weighted_f1(), 31.0 / 70, 1e-12);

  const std::string text = cm.format({"cat", "dog", "bird", "fish"});
  EXPECT_NE(text.find("precision"), std::string::npos) << text;
  EXPECT_NE(text.find("macro avg"), std::string::npos);
  EXPECT_NE(text.find("weighted avg"), std::string::npos);
  EXPECT_NE(text.find("fish"), std::string::npos);
  EXPECT_NE(text.find("0.5714"), std::string::npos);
  EXPECT_NE(text.find("rows: true class"), std::string::npos);
}

TEST(ConfusionMatrix, MergeEqualsOneBatch) {
  const Tensor logits = example_logits();
  const std::vector<float> v = logits.to_vector<float>();
  const std::vector<int64_t> y = example_labels().to_vector<int64_t>();
  ConfusionMatrix a(4), b(4), whole(4);
  a.add(Tensor::from_vector<float>({v.begin(), v.begin() + 16}, {4, 4}),
        Tensor::from_vector<int32_t>({0, 0, 0, 1}, {4}));  // any integer label type
  b.add(Tensor::from_vector<float>({v.begin() + 16, v.end()}, {6, 4}),
        Tensor::from_vector<int64_t>({y.begin() + 4, y.end()}, {6, 1}));
  whole.add(logits, example_labels());
  a.add(b);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(a.counts(i, j), whole.counts(i, j));
  EXPECT_EQ(a.total(), 10);

  ConfusionMatrix other(3);
  try {
    a.add(other);
    FAIL() << "merging 3 classes into 4 should fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  }
}

TEST(ConfusionMatrix, BadLabelsNameValueIndexAndClassCount) {
  ConfusionMatrix cm(4);
  const Tensor logits = Tensor::zeros(DType::kFloat32, {3, 4});
  try {
    cm.add(logits, Tensor::from_vector<int64_t>({1, 2, 7}, {3}));
    FAIL() << "label 7 should be rejected";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(m.find("label 7"), std::string::npos) << m;
    EXPECT_NE(m.find("index 2"), std::string::npos) << m;
    EXPECT_NE(m.find("4 classes"), std::string::npos) << m;
  }
  EXPECT_EQ(cm.total(), 0);  // the bad batch counted nothing
  EXPECT_THROW(cm.add(logits, Tensor::from_vector<int64_t>({-1, 0, 0}, {3})), Error);
  EXPECT_THROW(cm.add(logits, Tensor::from_vector<int64_t>({0, 0}, {2})), Error);
  EXPECT_THROW(cm.add(logits, Tensor::from_vector<float>({0, 0, 0}, {3})), Error);
  EXPECT_THROW(cm.add(Tensor::zeros(DType::kFloat32, {3, 5}), Tensor::zeros(DType::kInt64, {3})),
               Error);
  EXPECT_THROW(ConfusionMatrix(0), Error);
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(MetricsWriter, LinesParseBackWithTheirFields) {
  test::TempDir dir;
  const std::string path = dir.file("run.jsonl");
  ConfusionMatrix cm(4);
  cm.add(example_logits(), example_labels());
  {
    MetricsWriter w(path);
    StepStats s;
    s.step = 1, s.epoch = 1, s.loss = 2.25, s.samples = 64, s.seconds = 0.125, s.lr = 0.1;
    w.write_step(s);
    // Each line is flushed as written: the file can be followed during the run.
    EXPECT_EQ(read_jsonl(path).size(), 1u);
    s.step = 2, s.compute_ms = 10.0, s.comm_ms = 4.0, s.exposed_comm_ms = 1.5;
    w.write_step(s);
    EpochStats e;
    e.epoch = 1, e.steps = 2, e.samples = 128, e.seconds = 0.25, e.train_loss = 2.0;
    e.train_accuracy = 0.25, e.samples_per_s = 512, e.steps_per_s = 8, e.lr = 0.1;
    w.write_epoch(e);  // no validation: val_* are NaN
    w.write_summary(cm, {"cat", "dog", "bird", "fish"}, {{"speedup", 1.8}});
  }
  const std::vector<nlohmann::json> lines = read_jsonl(path);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["type"], "step");
  for (const char* k : {"step", "epoch", "loss", "samples", "seconds", "lr"})
    EXPECT_TRUE(lines[0].contains(k)) << k;
  EXPECT_FALSE(lines[0].contains("compute_ms"));
  EXPECT_DOUBLE_EQ(lines[0]["loss"].get<double>(), 2.25);
  EXPECT_DOUBLE_EQ(lines[1]["exposed_comm_ms"].get<double>(), 1.5);
  EXPECT_EQ(lines[2]["type"], "epoch");
  for (const char* k : {"epoch", "steps", "samples", "seconds", "train_loss", "train_accuracy",
                        "val_loss", "val_accuracy", "samples_per_s", "steps_per_s", "lr"})
    EXPECT_TRUE(lines[2].contains(k)) << k;
  EXPECT_TRUE(lines[2]["val_accuracy"].is_null());
  EXPECT_EQ(lines[2]["samples"].get<int64_t>(), 128);
  const nlohmann::json& sum = lines[3];
  EXPECT_EQ(sum["type"], "summary");
  EXPECT_DOUBLE_EQ(sum["accuracy"].get<double>(), 0.5);
  EXPECT_EQ(sum["confusion_matrix"][3][0].get<int64_t>(), 1);
  EXPECT_EQ(sum["class_names"][3], "fish");
  EXPECT_EQ(sum["per_class"][3]["precision"].get<double>(), 0.0);
  EXPECT_NEAR(sum["macro_avg"]["f1"].get<double>(), 23.0 / 56, 1e-12);
  EXPECT_DOUBLE_EQ(sum["speedup"].get<double>(), 1.8);
}

TEST(MetricsWriter, UnwritablePathIsAnIoErrorNamingIt) {
  try {
    MetricsWriter w("/nonexistent-folder/run.jsonl");
    FAIL() << "opening under a missing folder should fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-folder/run.jsonl"), std::string::npos);
  }
}

// A plausible 3-epoch Fashion-MNIST run with every section of the report filled.
ReportData sample_report() {
  ReportData d;
  d.model = "models/cnn.onnx";
  d.command_line = "onnx-mirror-train train models/cnn.onnx --data fashion-mnist --replicas 2 "
                   "--epochs 5 --report report.html";
  d.replicas = 2;
  d.world_size = 2;
  d.date = "2025-01-01 12:00:00 +0000";
  d.info = {{"optimizer", "sgd, momentum 0.9, lr 0.05 cosine"}, {"global batch", "128"}};
  d.class_names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                   "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  const double train_loss[5] = {0.62, 0.38, 0.33, 0.30, 0.28};
  const double val_loss[5] = {0.45, 0.37, 0.33, 0.31, 0.30};
  const double val_acc[5] = {0.842, 0.868, 0.881, 0.889, 0.893};
  int64_t step = 0;
  for (int e = 0; e < 5; ++e) {
    EpochStats s;
    s.epoch = e + 1, s.steps = 469, s.samples = 60000, s.seconds = 9.5 - 0.2 * e;
    s.train_loss = train_loss[e], s.train_accuracy = val_acc[e] + 0.01;
    s.val_loss = val_loss[e], s.val_accuracy = val_acc[e];
    s.samples_per_s = 60000 / s.seconds, s.steps_per_s = 469 / s.seconds, s.lr = 0.05 / (e + 1);
    d.epochs.push_back(s);
    for (int k = 0; k < 469; ++k) {
      StepStats st;
      st.step = ++step, st.epoch = e + 1, st.samples = 128, st.seconds = 0.02;
      st.loss = 2.3 * std::exp(-0.01 * static_cast<double>(step)) + train_loss[e] * 0.9;
      st.compute_ms = 15.0, st.comm_ms = 4.0, st.exposed_comm_ms = 1.0;
      d.steps.push_back(st);
    }
  }
  d.confusion = ConfusionMatrix(10);
  for (int i = 0; i < 10; ++i)
    for (int j = 0; j < 10; ++j)
      d.confusion.add_pair(i, j, i == j ? 850 + 13 * i : ((i * 7 + j * 3) % 11 == 0 ? 60 : (i + j) % 4));
  d.speedup = SpeedupSummary{2, 6700.0, 3800.0};
  d.overlap = summarize_overlap(d.steps);
  d.no_overlap = OverlapSummary{100, 21.0, 15.0, 6.0, 6.0};
  return d;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(Report, SelfContainedPageWithChartsAndClassNames) {
  test::TempDir dir;
  ReportData d = sample_report();
  d.class_names[2] = "Pull<over> & \"co\"";  // must come out escaped
  const std::string path = dir.file("report.html");
  write_report(path, d);
  ASSERT_TRUE(file_exists(path));
  const std::string html = read_file_bytes(path);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("</html>"), std::string::npos);
  EXPECT_GE(count(html, "<svg"), 5u);  // loss, accuracy, throughput, step loss, heat map (+bars)
  EXPECT_EQ(count(html, "<svg"), count(html, "</svg>"));
  EXPECT_EQ(count(html, "<table"), count(html, "</table>"));
  EXPECT_EQ(html.find("http"), std::string::npos) << "the page must need no network";
  EXPECT_EQ(html.find("<script"), std::string::npos);
  for (const char* name : {"T-shirt/top", "Ankle boot", "Sneaker"})
    EXPECT_NE(html.find(name), std::string::npos) << name;
  EXPECT_NE(html.find("Pull&lt;over&gt; &amp; &quot;co&quot;"), std::string::npos);
  EXPECT_EQ(html.find("Pull<over>"), std::string::npos);
  for (const char* section : {"Epochs", "Loss per epoch", "Accuracy per epoch",
                              "Throughput per epoch", "Confusion matrix", "Per-class metrics",
                              "Speed-up", "Overlap", "models/cnn.onnx", "--replicas 2"})
    EXPECT_NE(html.find(section), std::string::npos) << section;
  EXPECT_NE(html.find("1.76&times;"), std::string::npos);  // 6700 / 3800

  if (const char* keep = std::getenv("OMT_REPORT_SAMPLE")) write_report(keep, sample_report());
}

TEST(Report, MinimalDataAndUnwritablePath) {
  ReportData d;  // no epochs, no matrix: header only, still a page
  d.model = "m.onnx";
  const std::string html = render_report(d);
  EXPECT_NE(html.find("m.onnx"), std::string::npos);
  EXPECT_EQ(html.find("Confusion matrix"), std::string::npos);
  try {
    write_report("/nonexistent-folder/report.html", d);
    FAIL() << "writing under a missing folder should fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-folder/report.html"), std::string::npos);
  }
}

TEST(Report, SummarizeOverlapAveragesOnlyStepsThatCarryIt) {
  std::vector<StepStats> steps(4);
  EXPECT_FALSE(summarize_overlap(steps).has_value());
  steps[1].compute_ms = 10, steps[1].comm_ms = 4, steps[1].exposed_comm_ms = 2;
  steps[3].compute_ms = 20, steps[3].comm_ms = 6, steps[3].exposed_comm_ms = 0;
  const auto o = summarize_overlap(steps);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->steps, 2);
  EXPECT_DOUBLE_EQ(o->compute_ms, 15);
  EXPECT_DOUBLE_EQ(o->comm_ms, 5);
  EXPECT_DOUBLE_EQ(o->exposed_comm_ms, 1);
}

std::string captured(std::FILE* f, char* buf) {
  std::fflush(f);
  return std::string(buf);
}

TEST(ProgressBar, PlainModePrintsAboutEveryTenthOfTheEpoch) {
  char* buf = nullptr;
  size_t size = 0;
  std::FILE* f = open_memstream(&buf, &size);
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar(3, 10, 938, f, /*force_plain=*/true);
    EXPECT_FALSE(bar.interactive());
    for (int s = 1; s <= 938; ++s) bar.update(s, s * 64, 0.4123, s * 0.01);
  }  // the destructor must not repeat the last line
  const std::string out = captured(f, buf);
  std::fclose(f);
  std::free(buf);
  const size_t lines = count(out, "\n");
  EXPECT_GE(lines, 9u) << out;
  EXPECT_LE(lines, 11u) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_NE(out.find("epoch 3/10 94/938 steps (10%)"), std::string::npos) << out;
  EXPECT_NE(out.find("938/938 steps (100%)"), std::string::npos) << out;
  EXPECT_NE(out.find("6,400 samples/s"), std::string::npos) << out;  // 64 samples per 0.01 s
  EXPECT_NE(out.find("loss 0.4123"), std::string::npos) << out;
  EXPECT_EQ(count(out, "938/938"), 1u) << out;
}

TEST(ProgressBar, SparseUpdatesAndUnfinishedEpoch) {
  char* buf = nullptr;
  size_t size = 0;
  std::FILE* f = open_memstream(&buf, &size);
  {
    ProgressBar bar(1, 2, 100, f, true);
    for (int s = 7; s <= 50; s += 7) bar.update(s, s * 10, 1.0, s * 0.1);
    bar.finish();  // stopped early: the last state is printed once
    bar.update(60, 600, 1.0, 6.0);  // ignored after finish()
  }
  const std::string out = captured(f, buf);
  std::fclose(f);
  std::free(buf);
  EXPECT_NE(out.find("49/100 steps"), std::string::npos) << out;
  EXPECT_EQ(out.find("60/100"), std::string::npos) << out;
  EXPECT_EQ(count(out, "49/100"), 1u) << out;
}

TEST(ProgressBar, TerminalLineLayout) {
  ProgressBar bar(3, 10, 20, nullptr, true);
  bar.update(10, 12345 * 4, 0.4123, 4.0);  // no output stream: only the text is checked
  EXPECT_EQ(bar.line(true),
            "epoch 3/10 [##########..........] 10/20 steps  12,345 samples/s  loss 0.4123  ETA 00:04");
  EXPECT_EQ(format_duration(3725), "1:02:05");
  EXPECT_EQ(format_thousands(1234567.4), "1,234,567");
}

}  // namespace
}  // namespace omt

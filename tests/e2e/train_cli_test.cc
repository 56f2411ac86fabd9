// onnx-mirror-train's training commands end to end, as a user runs them: grad, train,
// export-training-graph and eval on small real data (a slice of Fashion-MNIST), resume,
// multi-process worlds, a dead peer, ranks launched by hand with another configuration or
// run secret, traces, and the errors users hit. Label: slow.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <cmath>
#include <netinet/in.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "common/file_util.h"
#include "graph/onnx_io.h"
#include "runtime/data/dataset.h"
#include "runtime/data/npy.h"
#include "tests/test_util.h"

namespace omt {
namespace {

using test::run_tool;
using test::source_path;

// A labelled slice of Fashion-MNIST as an .npz: 'images' uint8 [n,28,28] and 'labels'.
std::string write_slice(const test::TempDir& dir, const std::string& name, const std::string& split, int64_t n,
                        int64_t label_offset = 0) {
  const Dataset d = load_dataset("fashion-mnist:" + split);
  NamedTensors out;
  Tensor images = Tensor::empty(DType::kUInt8, {n, 28, 28});
  std::memcpy(images.raw(), d.only_features().raw(), images.nbytes());
  Tensor labels = Tensor::empty(DType::kInt64, {n});
  for (int64_t i = 0; i < n; ++i) labels.data<int64_t>()[i] = d.labels.data<int64_t>()[i] + label_offset;
  out.set("images", images);
  out.set("labels", labels);
  const std::string path = dir.file(name);
  write_npz(path, out);
  return path;
}

void expect_failure(const test::CommandResult& r, const std::vector<std::string>& parts) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "crashed:\n" << r.output;
  for (const auto& p : parts) EXPECT_NE(r.output.find(p), std::string::npos) << "missing '" << p << "' in:\n" << r.output;
}

double parse_percent(const std::string& text, const std::string& before) {
  const auto at = text.rfind(before);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + before.size()));
}

TEST(TrainCli, GradWritesLossAndOneGradientPerParameter) {
  test::TempDir dir;
  const NamedTensors ref = read_npz(source_path("tests/reference/mlp.npz"));
  NamedTensors batch;
  batch.set("input", ref.at("input"));
  batch.set("y", ref.at("labels"));
  write_npz(dir.file("batch.npz"), batch);
  const auto r = run_tool("grad " + source_path("tests/reference/mlp_op17.onnx") + " --data " + dir.file("batch.npz") +
                          " --labels y --loss softmax_cross_entropy --output " + dir.file("grads.npz"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const NamedTensors grads = read_npz(dir.file("grads.npz"));
  EXPECT_TRUE(test::tensors_close(grads.at("loss"), ref.at("loss"), 1e-4, 1e-5));
  for (const char* p : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"})
    EXPECT_TRUE(test::tensors_close(grads.at(p), ref.at(std::string("grad/") + p), 1e-4, 1e-5)) << p;
}

// Every argument CLI11 cannot parse exits 2, the documented code for bad arguments; --help 0.
TEST(TrainCli, ParseErrorsExitTwo) {
  const std::string mlp = source_path("models/mlp.onnx");
  for (const std::string& args : {"train " + mlp + " --data fashion-mnist --epochs abc",
                                  "train " + mlp + " --data fashion-mnist --no-such-option", std::string("frobnicate"),
                                  std::string("")}) {
    const auto r = run_tool(args);
    EXPECT_EQ(r.exit_code, 2) << args << ":\n" << r.output;
  }
  EXPECT_EQ(run_tool("train --help").exit_code, 0);
  // Out of range: each named, before anything is loaded.
  const std::string train = "train " + mlp + " --data fashion-mnist --steps 1 ";
  for (const char* bad : {"--epochs -1", "--steps -1", "--nproc 0", "--threads -1", "--threads 100000",
                          "--replicas 100000", "--momentum -1", "--bucket-cap-mb nan", "--lr inf",
                          "--keep-checkpoints 0", "--collectives foo", "--global-batch 0"}) {
    const auto r = run_tool(train + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ":\n" << r.output;
    const std::string option = std::string(bad).substr(0, std::string(bad).find(' '));
    EXPECT_NE(r.output.find(option), std::string::npos) << bad << ":\n" << r.output;
  }
}

// `grad` on today's exports through the CLI: BERT's three inputs and GPT-2's token labels
// [B, T] (class axis last) from one NPZ, against torch 2.15 (tests/data/modern).
TEST(TrainCli, GradOfDynamoExportsMatchesTorch) {
  for (const char* model : {"bert", "gpt2"}) {
    test::TempDir dir;
    const std::string base = source_path(std::string("tests/data/modern/") + model);
    const NamedTensors ref = read_npz(base + "_ref.npz");
    NamedTensors batch;
    for (const char* name : {"input_ids", "attention_mask", "token_type_ids", "labels"})
      if (ref.has(name)) batch.set(name, ref.at(name));
    write_npz(dir.file("batch.npz"), batch);
    const auto r = run_tool("grad " + base + "_dynamo.onnx --data " + dir.file("batch.npz") +
                            " --labels labels --output " + dir.file("grads.npz"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const NamedTensors grads = read_npz(dir.file("grads.npz"));
    EXPECT_NEAR(grads.at("loss").value_as_double(0), ref.at("loss").value_as_double(0), 1e-4);
    int compared = 0;
    for (const auto& name : grads.names()) {
      if (name == "loss" || !ref.has("grad/" + name)) continue;
      const Tensor& want = ref.at("grad/" + name);
      const Tensor& got = grads.at(name);
      ASSERT_EQ(got.shape(), want.shape()) << name;
      for (int64_t i = 0; i < got.numel(); ++i)
        ASSERT_LE(std::fabs(got.value_as_double(i) - want.value_as_double(i)), 1e-5 + 1e-4 * std::fabs(want.value_as_double(i)))
            << model << " " << name << "[" << i << "]";
      ++compared;
    }
    EXPECT_GE(compared, 20) << model;
  }
}

// Token-level and multi-input training through the CLI against torch
// (tests/reference/tokens/make_tokens.py): a GPT-2 LM with --shift-labels, ignored padding
// and label smoothing, and a three-input BERT classifier; 3 SGD, AdamW or clipped SGD
// (--clip-grad-norm) steps on the whole batch, split over 1, 2 and 4 replicas whose shards
// hold different counts of counted tokens. The step losses, the gradient norms and the
// trained model's logits (predicted with 2 replicas) match torch's.
TEST(TrainCli, TokenAndMultiInputTrainingMatchesTorch) {
  struct Case {
    const char* model;
    const char* extra;
    const char* eval_extra;
  };
  for (const Case c : {Case{"gpt2", " --shift-labels --label-smoothing 0.1", " --shift-labels"}, Case{"bert", "", ""}}) {
    const std::string base = source_path(std::string("tests/data/tokens/") + c.model);
    const std::string onnx = base + (std::string(c.model) == "gpt2" ? "_lm.onnx" : "_cls.onnx");
    const NamedTensors ref = read_npz(base + "_ref.npz");
    const NamedTensors data = read_npz(base + "_data.npz");
    NamedTensors inputs = data;
    inputs.erase("labels");
    for (const std::string opt : {"sgd", "adamw", "sgd_clip"}) {
      for (int replicas : {1, 2, 4}) {
        test::TempDir dir;
        write_npz(dir.file("inputs.npz"), inputs);
        const std::string hyper = opt == "sgd"        ? " --optimizer sgd --lr 0.1"
                                  : opt == "sgd_clip" ? " --optimizer sgd --lr 0.1 --clip-grad-norm 0.1"
                                                      : " --optimizer adamw --lr 0.01 --weight-decay 0.01";
        const auto r = run_tool("train " + onnx + " --data " + base + "_data.npz" + c.extra +
                                " --global-batch 8 --steps 3 --no-shuffle" + hyper +
                                " --replicas " + std::to_string(replicas) + " --metrics " + dir.file("run.jsonl") +
                                " --output " + dir.file("trained.onnx"));
        ASSERT_EQ(r.exit_code, 0) << r.output;
        std::ifstream jsonl(dir.file("run.jsonl"));
        std::vector<double> losses, norms;
        for (std::string line; std::getline(jsonl, line);) {
          const auto j = nlohmann::json::parse(line);
          if (j["type"] != "step") continue;
          losses.push_back(j["loss"].get<double>());
          if (j.contains("grad_norm")) norms.push_back(j["grad_norm"].get<double>());
        }
        if (opt == "sgd_clip") {  // the norm torch's clip_grad_norm_ returned, before clipping
          const Tensor& want = ref.at("sgd_clip/grad_norms");
          ASSERT_EQ(static_cast<int64_t>(norms.size()), want.numel());
          for (size_t i = 0; i < norms.size(); ++i)
            EXPECT_NEAR(norms[i], want.value_as_double(static_cast<int64_t>(i)), 1e-4 * want.value_as_double(static_cast<int64_t>(i)))
                << c.model << " " << replicas << " replicas, step " << i + 1;
        }
        const Tensor& want_losses = ref.at(opt + "/losses");
        ASSERT_EQ(static_cast<int64_t>(losses.size()), want_losses.numel());
        for (size_t i = 0; i < losses.size(); ++i)
          EXPECT_NEAR(losses[i], want_losses.value_as_double(static_cast<int64_t>(i)),
                      1e-5 + 1e-4 * std::fabs(want_losses.value_as_double(static_cast<int64_t>(i))))
              << c.model << " " << opt << " " << replicas << " replicas, step " << i + 1;
        const auto p = run_tool("predict " + dir.file("trained.onnx") + " --data " + dir.file("inputs.npz") +
                                " --replicas 2 --output " + dir.file("out.npz"));
        ASSERT_EQ(p.exit_code, 0) << p.output;
        const Tensor got = read_npz(dir.file("out.npz")).at("logits");
        const Tensor& want = ref.at(opt + "/logits");
        ASSERT_EQ(got.shape(), want.shape());
        for (int64_t i = 0; i < got.numel(); ++i)
          ASSERT_LE(std::fabs(got.value_as_double(i) - want.value_as_double(i)), 1e-5 + 1e-4 * std::fabs(want.value_as_double(i)))
              << c.model << " " << opt << " " << replicas << " replicas, logit " << i;
      }
    }
    // Accumulation: K micro-batches per replica make the one-batch update, and clipping
    // across processes uses the norm of the all-reduced buckets, the same on every rank.
    struct Layout {
      const char* options;
      const char* ref;
    };
    for (const Layout layout : {Layout{" --accumulate 2", "sgd"}, Layout{" --accumulate 4 --replicas 2", "sgd"},
                                Layout{" --accumulate 2 --nproc 2", "sgd"},
                                Layout{" --nproc 2 --replicas 1 --clip-grad-norm 0.1", "sgd_clip"},
                                Layout{" --nproc 2 --replicas 2 --clip-grad-norm 0.1", "sgd_clip"},
                                Layout{" --accumulate 2 --replicas 2 --clip-grad-norm 0.1", "sgd_clip"}}) {
      test::TempDir dir;
      write_npz(dir.file("inputs.npz"), inputs);
      const auto r = run_tool("train " + onnx + " --data " + base + "_data.npz" + c.extra +
                              " --global-batch 8 --steps 3 --no-shuffle --optimizer sgd --lr 0.1" + layout.options +
                              " --output " + dir.file("trained.onnx"));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      const auto p = run_tool("predict " + dir.file("trained.onnx") + " --data " + dir.file("inputs.npz") +
                              " --output " + dir.file("out.npz"));
      ASSERT_EQ(p.exit_code, 0) << p.output;
      const Tensor got = read_npz(dir.file("out.npz")).at("logits");
      const Tensor& want = ref.at(std::string(layout.ref) + "/logits");
      for (int64_t i = 0; i < got.numel(); ++i)
        ASSERT_LE(std::fabs(got.value_as_double(i) - want.value_as_double(i)), 1e-5 + 1e-4 * std::fabs(want.value_as_double(i)))
            << c.model << layout.options << ", logit " << i;
    }
    // `grad` reads the same data the same way: its loss is torch's before any step.
    test::TempDir dir;
    const auto g = run_tool("grad " + onnx + " --data " + base + "_data.npz" + c.extra + " --output " + dir.file("g.npz"));
    ASSERT_EQ(g.exit_code, 0) << g.output;
    EXPECT_NEAR(read_npz(dir.file("g.npz")).at("loss").value_as_double(0), ref.at("loss0").value_as_double(0), 1e-5);
    // `eval` scores per counted token as training does.
    const auto e = run_tool("eval " + onnx + " --data " + base + "_data.npz" + c.eval_extra);
    ASSERT_EQ(e.exit_code, 0) << e.output;
    if (std::string(c.model) == "gpt2") {
      EXPECT_NE(e.output.find("counted tokens, token accuracy"), std::string::npos) << e.output;
    }
  }
}

// Note [Deduplicated statistics] in graph/onnx_io.cc: a fresh Conv-BN net from torch's legacy
// exporter reads its running statistics through Identity(bias) and Identity(weight); it trains
// (was: "running mean and variance must be initializers"), and grad's loss and gradients in
// training mode are torch's (tests/reference/dedup_bn/make_dedup_bn.py).
TEST(TrainCli, DeduplicatedBatchNormStatisticsTrainAsTorch) {
  const std::string base = source_path("tests/data/dedup_bn/");
  test::TempDir dir;
  const auto g = run_tool("grad " + base + "conv_bn_legacy.onnx --data " + base + "batch.npz --output " + dir.file("g.npz"));
  ASSERT_EQ(g.exit_code, 0) << g.output;
  const NamedTensors got = read_npz(dir.file("g.npz")), ref = read_npz(base + "ref.npz");
  EXPECT_NEAR(got.at("loss").value_as_double(0), ref.at("loss").value_as_double(0), 1e-5);
  int compared = 0;
  for (const auto& name : ref.names()) {
    if (name.rfind("grad/", 0) != 0) continue;
    const Tensor& want = ref.at(name);
    const Tensor& have = got.at(name.substr(5));
    ASSERT_EQ(have.numel(), want.numel()) << name;
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(have.value_as_double(i), want.value_as_double(i), 1e-5 + 1e-4 * std::fabs(want.value_as_double(i)))
          << name << "[" << i << "]";
    ++compared;
  }
  EXPECT_EQ(compared, 6);
  const auto t = run_tool("train " + base + "conv_bn_legacy.onnx --data " + base + "batch.npz --global-batch 6 --steps 2"
                          " --replicas 2 --output " + dir.file("trained.onnx"));
  ASSERT_EQ(t.exit_code, 0) << t.output;
}

// predict feeds inputs as train does (Note [Inputs from arrays]): by name or --input, arrays
// no input reads (the labels) left out, every input without an array named at once.
TEST(TrainCli, PredictBindsInputsByNameOrMapping) {
  const std::string base = source_path("tests/data/tokens/bert");
  test::TempDir dir;
  const auto by_name = run_tool("predict " + base + "_cls.onnx --data " + base + "_data.npz --output " + dir.file("a.npz"));
  ASSERT_EQ(by_name.exit_code, 0) << by_name.output;
  NamedTensors renamed = read_npz(base + "_data.npz");
  renamed.set("ids", renamed.at("input_ids"));
  renamed.erase("input_ids");
  write_npz(dir.file("renamed.npz"), renamed);
  const auto mapped = run_tool("predict " + base + "_cls.onnx --data " + dir.file("renamed.npz") +
                               " --input input_ids=ids --replicas 2 --output " + dir.file("b.npz"));
  ASSERT_EQ(mapped.exit_code, 0) << mapped.output;
  const Tensor a = read_npz(dir.file("a.npz")).at("logits"), b = read_npz(dir.file("b.npz")).at("logits");
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_NEAR(a.value_as_double(i), b.value_as_double(i), 1e-6) << i;
  const auto missing = run_tool("predict " + base + "_cls.onnx --data " + dir.file("renamed.npz"));
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("input_ids"), std::string::npos) << missing.output;
  EXPECT_NE(missing.output.find("ids"), std::string::npos) << missing.output;
}

// --accumulate K all-reduces each bucket once per step, not once per micro-batch: the trace
// holds one reduction of bucket 0 per step.
TEST(TrainCli, AccumulationReducesEachBucketOncePerStep) {
  test::TempDir dir;
  const std::string base = source_path("tests/data/tokens/gpt2");
  for (const int k : {1, 4}) {
    const auto r = run_tool("train " + base + "_lm.onnx --data " + base + "_data.npz --shift-labels --global-batch 8 "
                            "--steps 3 --accumulate " + std::to_string(k) + " --trace " + dir.file("trace.json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string trace = read_file_bytes(dir.file("trace.json"));
    int reductions = 0;
    for (size_t at = trace.find("\"local reduce bucket 0\""); at != std::string::npos;
         at = trace.find("\"local reduce bucket 0\"", at + 1))
      ++reductions;
    EXPECT_EQ(reductions, 3) << "--accumulate " << k;
  }
}

// grad, predict and export-training-graph check --output before they load or compute anything.
TEST(TrainCli, UnwritableOutputsOfTheOtherCommandsFailFirst) {
  const std::string model = source_path("tests/data/tokens/gpt2_lm.onnx");
  const std::string data = source_path("tests/data/tokens/gpt2_data.npz");
  for (const std::string& cmd : {"grad " + model + " --data " + data + " --shift-labels",
                                "predict " + model + " --data " + data, "export-training-graph " + model}) {
    const auto r = run_tool(cmd + " --output /nonexistent-omt/out.npz");
    expect_failure(r, {"--output", "/nonexistent-omt", "does not exist"});
  }
}

// What a user gets wrong with token data is named before step 1.
TEST(TrainCli, TokenDataErrorsNameTheProblem) {
  test::TempDir dir;
  const std::string gpt2 = source_path("tests/data/tokens/gpt2_lm.onnx");
  const std::string bert = source_path("tests/data/tokens/bert_cls.onnx");
  const NamedTensors data = read_npz(source_path("tests/data/tokens/bert_data.npz"));
  NamedTensors two = data;
  two.erase("token_type_ids");
  two.erase("attention_mask");
  write_npz(dir.file("one_input.npz"), two);
  expect_failure(run_tool("train " + bert + " --data " + dir.file("one_input.npz") + " --steps 1"),
                 {"no array for model inputs", "'attention_mask'", "'token_type_ids'", "--input"});
  expect_failure(run_tool("train " + bert + " --data " + dir.file("one_input.npz") + " --input attention_mask=nope --steps 1"),
                 {"--input attention_mask=nope", "no feature array 'nope'"});
  expect_failure(run_tool("train " + bert + " --data " + dir.file("one_input.npz") + " --input mask=input_ids --steps 1"),
                 {"no input 'mask'", "'attention_mask'"});
  // GPT-2 token labels must be [N, T] for logits [N, T, V].
  NamedTensors lm = read_npz(source_path("tests/data/tokens/gpt2_data.npz"));
  Tensor short_labels = Tensor::zeros(DType::kInt64, {8, 5});
  lm.set("labels", short_labels);
  write_npz(dir.file("short.npz"), lm);
  expect_failure(run_tool("train " + gpt2 + " --data " + dir.file("short.npz") + " --steps 1"),
                 {"int64[8,5]", "'logits'", "[8,12]", "one class per position", "--shift-labels"});
  Tensor far = Tensor::zeros(DType::kInt64, {8, 12});
  far.data<int64_t>()[13] = 48;
  lm.set("labels", far);
  write_npz(dir.file("far.npz"), lm);
  expect_failure(run_tool("train " + gpt2 + " --data " + dir.file("far.npz") + " --steps 1"),
                 {"label 48 at position 13", "48 classes", "--ignore-index"});
  expect_failure(run_tool("train " + gpt2 + " --data " + dir.file("far.npz") + " --label-smoothing 2 --steps 1"),
                 {"--label-smoothing"});
}

// The ids of tests/data/tokens/gpt2_data.npz ([8, 12], padded with token 0) as a token file
// of `dtype` (uint16 or uint32), row after row: windows of 12 are the npz's rows.
std::string write_gpt2_tokens(const test::TempDir& dir, DType dtype, int64_t extra = 0) {
  const Tensor ids = read_npz(source_path("tests/data/tokens/gpt2_data.npz")).at("input_ids");
  std::string bytes;
  for (int64_t i = 0; i < ids.numel() + extra; ++i) {
    const uint32_t v = static_cast<uint32_t>(ids.value_as_double(i % ids.numel()));
    if (dtype == DType::kUInt16) {
      const uint16_t v16 = static_cast<uint16_t>(v);
      bytes.append(reinterpret_cast<const char*>(&v16), 2);
    } else {
      bytes.append(reinterpret_cast<const char*>(&v), 4);
    }
  }
  const std::string path = dir.file(std::string("gpt2_") + dtype_name(dtype) + ".bin");
  write_file_atomic(path, bytes);
  return path;
}

std::vector<double> step_losses(const std::string& jsonl_path) {
  std::ifstream jsonl(jsonl_path);
  std::vector<double> losses;
  for (std::string line; std::getline(jsonl, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "step") losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

// Note [Token files]: a token file of the GPT-2 test ids trains as the npz does. The ids are
// padded with token 0 and real tokens are 1..47, so --ignore-index 0 ignores exactly the
// padding torch's reference ignored (labels -100 there): the losses match torch's
// (tests/reference/tokens/make_tokens.py) on 1 and 2 replicas, and equal the npz path's,
// shuffled with a seed too (1 and 2 replicas, 2 processes); uint32 ids train as uint16 ones; `eval` scores both the same.
TEST(TrainCli, TokenFileTrainsAsTheNpzTokens) {
  test::TempDir dir;
  const std::string base = source_path("tests/data/tokens/gpt2");
  const NamedTensors ref = read_npz(base + "_ref.npz");
  NamedTensors ids_only;
  ids_only.set("input_ids", read_npz(base + "_data.npz").at("input_ids"));
  write_npz(dir.file("ids.npz"), ids_only);
  const std::string u16 = write_gpt2_tokens(dir, DType::kUInt16, 7);  // 7 tokens of a partial window, dropped
  const std::string u32 = write_gpt2_tokens(dir, DType::kUInt32);
  const std::string lm = " --shift-labels --label-smoothing 0.1 --ignore-index 0";
  auto train = [&](const std::string& data, const std::string& extra) {
    const auto r = run_tool("train " + base + "_lm.onnx --data " + data + lm + extra + " --metrics " +
                            dir.file("run.jsonl") + " --output " + dir.file("trained.onnx"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return step_losses(dir.file("run.jsonl"));
  };
  for (const std::string opt : {"sgd", "adamw"}) {
    const std::string hyper = opt == "sgd" ? " --optimizer sgd --lr 0.1" : " --optimizer adamw --lr 0.01 --weight-decay 0.01";
    const Tensor& want = ref.at(opt + "/losses");
    for (int replicas : {1, 2}) {
      const std::string common = " --global-batch 8 --steps 3 --no-shuffle" + hyper + " --replicas " + std::to_string(replicas);
      const std::vector<double> npz = train(dir.file("ids.npz"), common);
      const std::vector<double> bin = train(u16, " --seq-len 12" + common);
      const std::vector<double> bin32 = train(u32, " --seq-len 12 --token-dtype uint32" + common);
      ASSERT_EQ(static_cast<int64_t>(bin.size()), want.numel());
      EXPECT_EQ(bin, npz) << opt << " " << replicas << " replicas";
      EXPECT_EQ(bin32, bin) << opt << " " << replicas << " replicas";
      for (size_t i = 0; i < bin.size(); ++i)
        EXPECT_NEAR(bin[i], want.value_as_double(static_cast<int64_t>(i)),
                    1e-5 + 1e-4 * std::fabs(want.value_as_double(static_cast<int64_t>(i))))
            << opt << " " << replicas << " replicas, step " << i + 1;
    }
  }
  // Shuffled windows: the seeded sampler orders them as it orders npz rows, on any replica count.
  const std::string shuffled = " --global-batch 4 --steps 4 --seed 5 --optimizer sgd --lr 0.1";
  const std::vector<double> npz = train(dir.file("ids.npz"), shuffled);
  EXPECT_EQ(train(u16, " --seq-len 12" + shuffled), npz);
  const std::vector<double> two = train(u16, " --seq-len 12 --replicas 2" + shuffled);
  ASSERT_EQ(two.size(), npz.size());
  for (size_t i = 0; i < two.size(); ++i) EXPECT_NEAR(two[i], npz[i], 1e-5 * std::fabs(npz[i])) << "step " << i + 1;
  // Two processes each map the file and train their own windows of every batch.
  const std::vector<double> procs = train(u16, " --seq-len 12 --nproc 2" + shuffled);
  ASSERT_EQ(procs.size(), npz.size());
  for (size_t i = 0; i < procs.size(); ++i) EXPECT_NEAR(procs[i], npz[i], 1e-5 * std::fabs(npz[i])) << "step " << i + 1;
  // A validation token file, and `eval` of one, score as the npz.
  const auto v = run_tool("train " + base + "_lm.onnx --data " + u16 + " --val " + u16 + " --seq-len 12" + lm +
                          " --global-batch 8 --steps 1 --output " + dir.file("trained.onnx"));
  ASSERT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find("validating on " + u16 + " (8 samples)"), std::string::npos) << v.output;
  const auto e_npz = run_tool("eval " + dir.file("trained.onnx") + " --data " + dir.file("ids.npz") +
                              " --shift-labels --ignore-index 0 --batch 3");
  const auto e_bin = run_tool("eval " + dir.file("trained.onnx") + " --data " + u32 +
                              " --seq-len 12 --token-dtype uint32 --shift-labels --ignore-index 0 --batch 3");
  ASSERT_EQ(e_npz.exit_code, 0) << e_npz.output;
  ASSERT_EQ(e_bin.exit_code, 0) << e_bin.output;
  const std::string scores = e_npz.output.substr(e_npz.output.find(": 8 samples"));
  EXPECT_NE(e_bin.output.find(scores), std::string::npos) << e_bin.output << "\nvs\n" << e_npz.output;
}

// Note [Token files]: a token file is mapped, never read whole into the process. A 512 MiB
// file (sparse: ids 0) costs the run the sampler's permutation of its 22M windows (8 bytes
// each, 171 MiB) and little else: the id scan before step 1 gives back the pages it read, and
// steps touch only their windows. Reading the file in would add 512 MiB.
TEST(TrainCli, TokenFileIsMappedNotRead) {
  test::TempDir dir;
  const std::string gpt2 = source_path("tests/data/tokens/gpt2_lm.onnx");
  const std::string small = write_gpt2_tokens(dir, DType::kUInt16);
  const std::string big = dir.file("big.bin");
  {
    std::ofstream f(big, std::ios::binary);
    f.seekp((int64_t{512} << 20) - 1);
    f.put('\0');
  }
  auto peak_mb = [&](const std::string& data) {
    const auto r = run_tool("train " + gpt2 + " --data " + data + " --val " + small +
                            " --seq-len 12 --shift-labels --global-batch 8 --steps 3");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const auto at = r.output.find("peak resident memory: ");
    EXPECT_NE(at, std::string::npos) << r.output;
    return at == std::string::npos ? 0.0 : std::stod(r.output.substr(at + 22));
  };
  const double base = peak_mb(small), mapped = peak_mb(big);
  EXPECT_LT(mapped - base, 300) << "peak " << mapped << " MiB with the 512 MiB file, " << base << " MiB without";
}

// Note [Token files]: what is wrong with a token file or its options is named before step 1,
// with exit 2 (5 for a file that is not a regular file, as for every data file).
TEST(TrainCli, TokenFileErrorsNameTheProblem) {
  test::TempDir dir;
  const std::string gpt2 = source_path("tests/data/tokens/gpt2_lm.onnx");
  const std::string u16 = write_gpt2_tokens(dir, DType::kUInt16);
  auto expect_exit = [&](const std::string& args, int code, const std::vector<std::string>& parts) {
    const auto r = run_tool(args);
    EXPECT_EQ(r.exit_code, code) << args << "\n" << r.output;
    expect_failure(r, parts);
    EXPECT_EQ(r.output.find("epoch 1"), std::string::npos) << r.output;
  };
  const std::string train = "train " + gpt2 + " --shift-labels --steps 1 --data ";
  write_file_atomic(dir.file("odd.bin"), read_file_bytes(u16) + "x");
  expect_exit(train + dir.file("odd.bin") + " --seq-len 12", 2,
              {"odd.bin", "193 bytes", "uint16", "1 byte(s) left over", "--token-dtype"});
  expect_exit(train + u16 + " --seq-len 13", 2,
              {"gpt2_uint16.bin", "--seq-len 13", "'input_ids'", "exactly 12 tokens", "Pass --seq-len 12"});
  expect_exit(train + u16, 2, {"gpt2_uint16.bin", "needs --seq-len"});
  expect_exit(train + u16 + " --seq-len 1", 2, {"--seq-len must be at least 2", "got 1"});
  write_file_atomic(dir.file("short.bin"), std::string(22, '\1'));
  expect_exit(train + dir.file("short.bin") + " --seq-len 12", 2,
              {"short.bin", "holds 11 uint16 tokens", "fewer than one window of --seq-len 12"});
  std::string far = read_file_bytes(u16);
  far[2 * 30] = 48;  // token 30: one past the 48-token vocabulary
  write_file_atomic(dir.file("far.bin"), far);
  expect_exit(train + dir.file("far.bin") + " --seq-len 12", 2,
              {"far.bin", "token id 48 at token 30", "out of range", "(ids 0..47)", "--token-dtype"});
  expect_exit("eval " + gpt2 + " --shift-labels --data " + dir.file("far.bin") + " --seq-len 12", 2,
              {"far.bin", "token id 48 at token 30"});
  expect_exit("train " + gpt2 + " --steps 1 --data " + u16 + " --seq-len 12", 2, {"gpt2_uint16.bin", "--shift-labels"});
  expect_exit(train + source_path("tests/data/tokens/gpt2_data.npz") + " --seq-len 12", 2,
              {"--seq-len applies to token files"});
  expect_exit(train + u16 + " --seq-len 12 --token-dtype int16", 2, {"--token-dtype"});
  ASSERT_EQ(::mkfifo(dir.file("fifo.bin").c_str(), 0600), 0);
  expect_exit(train + dir.file("fifo.bin") + " --seq-len 12", 5, {"fifo.bin", "a FIFO"});
}

// Note [Windows longer than the positions]: GPT-2 exported with a symbolic sequence length
// (16 positions) trains on windows of any length up to 16, as the fixed-length export does on
// its 12; a longer --seq-len is named before step 1 by train and by eval, with the node that
// read past the position table.
TEST(TrainCli, DynamicSequenceExportRefusesWindowsLongerThanItsPositions) {
  test::TempDir dir;
  const std::string base = source_path("tests/data/tokens/gpt2_lm");
  const std::string u16 = write_gpt2_tokens(dir, DType::kUInt16);  // 96 tokens
  const std::string lm = " --shift-labels --ignore-index 0 --no-shuffle --optimizer sgd --lr 0.1";
  auto train = [&](const std::string& model, const std::string& extra) {
    const auto r = run_tool("train " + model + " --data " + u16 + lm + extra + " --metrics " + dir.file("run.jsonl") +
                            " --output " + dir.file("trained.onnx"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return step_losses(dir.file("run.jsonl"));
  };
  const std::string twelve = " --seq-len 12 --global-batch 8 --steps 3";
  const std::vector<double> fixed = train(base + ".onnx", twelve);
  const std::vector<double> dynamic = train(base + "_dynamic_seq.onnx", twelve);
  ASSERT_EQ(dynamic.size(), 3u);
  ASSERT_EQ(fixed.size(), 3u);
  for (size_t i = 0; i < fixed.size(); ++i) EXPECT_NEAR(dynamic[i], fixed[i], 1e-5 * fixed[i]) << "step " << i + 1;
  EXPECT_EQ(train(base + "_dynamic_seq.onnx", " --seq-len 16 --global-batch 2 --steps 2").size(), 2u);
  for (const std::string& cmd : {"train " + base + "_dynamic_seq.onnx --steps 1 --global-batch 2", "eval " + base + "_dynamic_seq.onnx"}) {
    const auto r = run_tool(cmd + " --shift-labels --data " + u16 + " --seq-len 17");
    EXPECT_EQ(r.exit_code, 2) << cmd << "\n" << r.output;
    expect_failure(r, {"gpt2_uint16.bin", "--seq-len 17", "does not run through the model", "out of range",
                       "pass a --seq-len no longer than its position table"});
    EXPECT_EQ(r.output.find("epoch 1"), std::string::npos) << r.output;
  }
}

TEST(TrainCli, TrainingErrorsNameTheProblem) {
  test::TempDir dir;
  const NamedTensors ref = read_npz(source_path("tests/reference/mlp.npz"));
  auto batch_with = [&](const std::string& name, const Tensor& labels) {
    NamedTensors batch;
    batch.set("input", ref.at("input"));
    batch.set(name, labels);
    const std::string path = dir.file(name + ".npz");
    write_npz(path, batch);
    return path;
  };
  const std::string mlp = source_path("tests/reference/mlp_op17.onnx");
  const std::string out = " --output " + dir.file("g.npz");
  const std::string good = batch_with("y", ref.at("labels"));
  const std::string grad = "grad " + mlp + " --data " + good + out;
  expect_failure(run_tool(grad + " --labels nope"), {"'nope'"});
  expect_failure(run_tool("grad " + mlp + " --data " + batch_with("yf", Tensor::zeros(DType::kFloat32, {8})) + out +
                          " --labels yf"),
                 {"yf", "float32", "int64"});
  expect_failure(run_tool("grad " + mlp + " --data " + batch_with("y2", Tensor::zeros(DType::kInt64, {8, 2})) + out +
                          " --labels y2"),
                 {"y2", "[8,2]"});
  expect_failure(run_tool("grad " + mlp + " --data " + good + out + " --labels input"), {"'input'"});
  expect_failure(run_tool(grad + " --labels y --loss hinge"), {"unknown loss 'hinge'", "softmax_cross_entropy"});
  expect_failure(run_tool(grad + " --labels y --loss model"), {"scalar", "[batch,5]"});
  expect_failure(run_tool("train " + source_path("tests/data/no_gradient_ops.onnx") + " --data " +
                          write_slice(dir, "s.npz", "train", 64) + " --steps 2"),
                 {"ConvTranspose (node 'deconv')", "1 op type(s)"});
  // InstanceNormalization (node 'norm') has had a gradient rule since the GroupNormalization work.
  const auto inspect = run_tool("inspect " + source_path("tests/data/no_gradient_ops.onnx"));
  EXPECT_NE(inspect.output.find("ops without a gradient rule (1"), std::string::npos) << inspect.output;
  EXPECT_EQ(inspect.output.find("InstanceNormalization (node"), std::string::npos) << inspect.output;
}

TEST(TrainCli, ExportTrainingGraphPassesTheChecker) {
  test::TempDir dir;
  for (const char* opt : {"sgd --momentum 0.9", "adam", "adamw --weight-decay 0.01"}) {
    const auto r = run_tool("export-training-graph " + source_path("models/cnn.onnx") + " --optimizer " + opt +
                            " --output " + dir.file("train.onnx"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Model m = load_onnx(dir.file("train.onnx"));  // runs ONNX's checker
    int updates = 0;
    for (const auto& n : m.graph.nodes) updates += n.op_type == "SGD" || n.op_type == "Adam";
    EXPECT_EQ(updates, 8) << opt;
  }
}

// Trains the MLP on a slice with 2 replicas; eval on the written model reproduces the final
// validation accuracy exactly; the model passes ONNX's checker; metrics and report exist.
TEST(TrainCli, TrainEvalAndOutputsAgree) {
  test::TempDir dir;
  const std::string train = write_slice(dir, "train.npz", "train", 1024);
  const std::string val = write_slice(dir, "val.npz", "test", 300);
  const auto r = run_tool("train " + source_path("models/mlp.onnx") + " --data " + train + " --val " + val +
                          " --epochs 2 --global-batch 64 --lr 0.05 --momentum 0.9 --replicas 2 --output " +
                          dir.file("mlp.onnx") + " --metrics " + dir.file("run.jsonl") + " --report " +
                          dir.file("report.html") + " --check-every 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double run_accuracy = parse_percent(r.output, "samples, accuracy ");
  EXPECT_GT(run_accuracy, 60.0) << r.output;
  load_onnx(dir.file("mlp.onnx"));
  const auto e = run_tool("eval " + dir.file("mlp.onnx") + " --data " + val + " --replicas 3");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_EQ(parse_percent(e.output, "samples, accuracy "), run_accuracy) << e.output;
  EXPECT_NE(e.output.find("confusion matrix"), std::string::npos);
  std::ifstream jsonl(dir.file("run.jsonl"));
  std::string line;
  int steps = 0, epochs = 0, summaries = 0;
  while (std::getline(jsonl, line)) {
    const auto j = nlohmann::json::parse(line);
    steps += j["type"] == "step";
    epochs += j["type"] == "epoch";
    summaries += j["type"] == "summary";
  }
  EXPECT_EQ(steps, 32);
  EXPECT_EQ(epochs, 2);
  EXPECT_EQ(summaries, 1);
  const std::string html = read_file_bytes(dir.file("report.html"));
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);
}

TEST(TrainCli, ResumeIsBitIdenticalAndWorksWithOtherReplicaCounts) {
  test::TempDir dir;
  const std::string train = write_slice(dir, "train.npz", "train", 640);
  const std::string common = "train " + source_path("models/mlp.onnx") + " --data " + train + " --val " + train +
                             " --global-batch 64 --lr 0.05 --momentum 0.9 --replicas 2 --seed 7";
  ASSERT_EQ(run_tool(common + " --epochs 2 --output " + dir.file("straight.onnx")).exit_code, 0);
  const auto first = run_tool(common + " --epochs 1 --checkpoint-dir " + dir.file("ck"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto resumed = run_tool(common + " --epochs 2 --resume " + dir.file("ck") + " --output " + dir.file("resumed.onnx"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos);
  const Model a = load_onnx(dir.file("straight.onnx")), b = load_onnx(dir.file("resumed.onnx"));
  for (const auto& name : a.graph.initializers.names())
    EXPECT_TRUE(test::tensors_identical(a.graph.initializers.at(name), b.graph.initializers.at(name))) << name;
  // A different replica count continues from the same checkpoint and keeps learning.
  const auto other = run_tool("train " + source_path("models/mlp.onnx") + " --data " + train + " --val " + train +
                              " --global-batch 64 --lr 0.05 --momentum 0.9 --replicas 3 --seed 7 --epochs 3 --resume " +
                              dir.file("ck"));
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_GT(parse_percent(other.output, "samples, accuracy "), 60.0) << other.output;
  // A checkpoint of another model is refused, naming the mismatch.
  expect_failure(run_tool("train " + source_path("models/cnn.onnx") + " --data " + train +
                          " --global-batch 64 --seed 7 --epochs 2 --resume " + dir.file("ck")),
                 {"different model"});
}

TEST(TrainCli, DataAndOutputErrors) {
  test::TempDir dir;
  const std::string mlp = source_path("models/mlp.onnx");
  expect_failure(run_tool("train " + mlp + " --data " + dir.file("missing.npz") + " --steps 1"), {"missing.npz"});
  const std::string shifted = write_slice(dir, "shifted.npz", "train", 64, 5);  // labels up to 14
  expect_failure(run_tool("train " + mlp + " --data " + shifted + " --steps 1"),
                 {"out of range", "10 classes"});
  NamedTensors small;
  small.set("images", Tensor::zeros(DType::kUInt8, {16, 32, 32}));
  small.set("labels", Tensor::zeros(DType::kInt64, {16}));
  write_npz(dir.file("32px.npz"), small);
  expect_failure(run_tool("train " + mlp + " --data " + dir.file("32px.npz") + " --steps 1"),
                 {"'input'", "[batch,1,28,28]", "[32,32]"});
  const std::string ok = write_slice(dir, "ok.npz", "train", 64);
  expect_failure(run_tool("train " + mlp + " --data " + ok + " --steps 1 --output /nonexistent/dir/m.onnx"),
                 {"/nonexistent/dir/m.onnx", "does not exist"});
  EXPECT_FALSE(file_exists("/nonexistent/dir/m.onnx"));
  expect_failure(run_tool("train " + mlp + " --data " + ok + " --steps 5 --lr 1e30"),
                 {"the loss became", "step"});
}

TEST(TrainCli, TwoProcessesTrainAndATraceShowsOverlap) {
  test::TempDir dir;
  const std::string train = write_slice(dir, "train.npz", "train", 512);
  const auto r = run_tool("train " + source_path("models/cnn.onnx") + " --data " + train + " --val " + train +
                          " --steps 6 --global-batch 64 --nproc 2 --replicas 1 --explain-buckets --check-every 2 " +
                          "--first-bucket-mb 0.05 --trace " + dir.file("trace.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on 2 replica(s) (1 per process)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bucket 0:"), std::string::npos) << r.output;
  const auto trace = nlohmann::json::parse(read_file_bytes(dir.file("trace.json")));
  int kernels = 0, comm = 0;
  for (const auto& e : trace["traceEvents"]) {
    kernels += e.value("cat", "") == "kernel";
    comm += e.value("cat", "") == "comm";
  }
  EXPECT_GT(kernels, 10);
  EXPECT_GT(comm, 0);
  EXPECT_NE(r.output.find("exposed communication"), std::string::npos);
}

TEST(TrainCli, ADeadProcessStopsTheOthersWithinTheDeadline) {
  test::TempDir dir;
  const std::string train = write_slice(dir, "train.npz", "train", 2048);
  const std::string cmd = test::tool_path() + " train " + source_path("models/cnn.onnx") + " --data " + train +
                          " --val " + train + " --epochs 50 --global-batch 64 --nproc 3 --replicas 1 --timeout 5 > " +
                          dir.file("log.txt") + " 2>&1";
  const pid_t parent = fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until training runs, then kill one child process of the world with SIGKILL.
  pid_t victim = -1;
  for (int i = 0; i < 200 && victim < 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto r = test::run_command("pgrep -P " + std::to_string(parent));
    if (r.exit_code == 0 && read_file_bytes(dir.file("log.txt")).find("training ") != std::string::npos)
      victim = std::stoi(r.output);
  }
  ASSERT_GT(victim, 0) << read_file_bytes(dir.file("log.txt"));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(victim, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  int status = 0;
  waitpid(parent, &status, 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  const std::string log = read_file_bytes(dir.file("log.txt"));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << log;
  EXPECT_LT(seconds, 5 + 10) << log;
  EXPECT_TRUE(std::regex_search(log, std::regex("rank [12]"))) << log;
}

// Ranks launched by hand, as mpirun or srun would (OMT_* variables, one file store): rank r
// runs `train <args[r]>` with the variables `env[r]` added ("OMT_RUN_SECRET=..."; none is
// inherited). Returns each rank's exit code and output.
std::vector<test::CommandResult> run_ranks(const test::TempDir& dir, const std::vector<std::string>& args,
                                           const std::vector<std::string>& env) {
  std::string script;
  const std::string run = std::to_string(getpid()) + "-" + std::to_string(std::rand());
  for (size_t r = 0; r < args.size(); ++r) {
    const std::string log = dir.file("rank" + std::to_string(r) + ".log");
    script += "(env -u OMT_RUN_SECRET OMT_RANK=" + std::to_string(r) + " OMT_LOCAL_RANK=" + std::to_string(r) +
              " OMT_WORLD_SIZE=" + std::to_string(args.size()) + " OMT_STORE=file:" + dir.file("store") +
              " OMT_RUN_ID=" + run + " OMT_TIMEOUT_S=20 " + env[r] + " " + test::tool_path() + " train " + args[r] +
              " > " + log + " 2>&1; echo $? > " + log + ".rc) & ";
  }
  const auto launched = test::run_command(script + "wait");
  EXPECT_EQ(launched.exit_code, 0) << launched.output;
  std::vector<test::CommandResult> out(args.size());
  for (size_t r = 0; r < args.size(); ++r) {
    const std::string log = dir.file("rank" + std::to_string(r) + ".log");
    out[r].output = read_file_bytes(log);
    out[r].exit_code = std::stoi(read_file_bytes(log + ".rc"));
  }
  return out;
}

const std::string kRunSecret = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

// Note [Configuration fingerprint]: another seed, lr or model on one rank fails on both, before
// step 1, naming the rank, the fields and both values.
TEST(TrainCli, RanksStartedWithAnotherSeedLrOrModelFailBeforeStepOne) {
  test::TempDir data;
  const std::string train = write_slice(data, "train.npz", "train", 256);
  const std::string cnn = source_path("models/cnn.onnx"), mlp = source_path("models/mlp.onnx");
  const std::string common = " --data " + train + " --steps 3 --global-batch 32 --replicas 1";
  struct Case {
    std::string rank0, rank1, expected;
  };
  for (const Case& c : {Case{cnn + common + " --seed 1", cnn + common + " --seed 7", "rank 1 differs from rank 0: seed 7 vs 1"},
                        Case{cnn + common + " --lr 0.05 --seed 1", cnn + common + " --lr 0.1 --seed 7",
                             "rank 1 differs from rank 0: lr 0.1 vs 0.05; seed 7 vs 1"},
                        Case{cnn + common, mlp + common, "rank 1 differs from rank 0: model "}}) {
    test::TempDir dir;
    const auto ranks = run_ranks(dir, {c.rank0, c.rank1}, {"OMT_RUN_SECRET=" + kRunSecret, "OMT_RUN_SECRET=" + kRunSecret});
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r) + " of '" + c.expected + "'");
      EXPECT_EQ(ranks[r].exit_code, 2) << ranks[r].output;
      EXPECT_NE(ranks[r].output.find(c.expected), std::string::npos) << ranks[r].output;
      EXPECT_NE(ranks[r].output.find("before step 1"), std::string::npos) << ranks[r].output;
      EXPECT_EQ(ranks[r].output.find("epoch 1"), std::string::npos) << ranks[r].output;
    }
  }
}

// Note [Run secret]: a rank without the launcher's secret, or with another one, is refused by
// the others and refuses them, on every rank, with the variable named and the secret never printed.
TEST(TrainCli, ARankWithoutTheRunSecretIsRefused) {
  test::TempDir data;
  const std::string train = write_slice(data, "train.npz", "train", 128);
  const std::string args = source_path("models/cnn.onnx") + " --data " + train + " --steps 2 --global-batch 32 --replicas 1";
  {
    test::TempDir dir;
    const auto ranks = run_ranks(dir, {args, args}, {"OMT_RUN_SECRET=" + kRunSecret, ""});
    EXPECT_EQ(ranks[0].exit_code, 6) << ranks[0].output;
    EXPECT_NE(ranks[0].output.find("refused rank 1's join record"), std::string::npos) << ranks[0].output;
    EXPECT_NE(ranks[0].output.find("without OMT_RUN_SECRET"), std::string::npos) << ranks[0].output;
    EXPECT_EQ(ranks[1].exit_code, 6) << ranks[1].output;
    EXPECT_NE(ranks[1].output.find("OMT_RUN_SECRET is not set"), std::string::npos) << ranks[1].output;  // the warning
    EXPECT_NE(ranks[1].output.find("this rank has no OMT_RUN_SECRET"), std::string::npos) << ranks[1].output;
  }
  {
    test::TempDir dir;
    const std::string other = "ffeeddccbbaa99887766554433221100";
    const auto ranks = run_ranks(dir, {args, args}, {"OMT_RUN_SECRET=" + kRunSecret, "OMT_RUN_SECRET=" + other});
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(ranks[r].exit_code, 6) << ranks[r].output;
      EXPECT_NE(ranks[r].output.find("with another OMT_RUN_SECRET"), std::string::npos) << ranks[r].output;
      EXPECT_EQ(ranks[r].output.find(kRunSecret), std::string::npos) << ranks[r].output;
      EXPECT_EQ(ranks[r].output.find(other), std::string::npos) << ranks[r].output;
    }
  }
  {  // The same secret on both: the job trains (and --nproc makes its own).
    test::TempDir dir;
    const auto ranks = run_ranks(dir, {args, args}, {"OMT_RUN_SECRET=" + kRunSecret, "OMT_RUN_SECRET=" + kRunSecret});
    for (int r = 0; r < 2; ++r) EXPECT_EQ(ranks[r].exit_code, 0) << ranks[r].output;
  }
}

// The 127.0.0.1 ports in Gloo's address records on a file store: an address is a
// sockaddr_storage (128 bytes) and a sequence number (8), after the run secret's 40-byte tag.
std::vector<int> gloo_ports_in(const std::string& store) {
  std::vector<int> ports;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(store, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string()[0] == '.') continue;  // a record being written
    std::ifstream f(it->path(), std::ios::binary);
    const std::string b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (size_t i = b.rfind("OMTAUTH1", 0) == 0 ? 40 : 0; i + 136 <= b.size(); i += 136) {
      const auto* a = reinterpret_cast<const unsigned char*>(b.data() + i);
      if (a[0] == AF_INET && a[1] == 0 && a[4] == 127 && a[5] == 0 && a[6] == 0 && a[7] == 1)
        ports.push_back(a[2] << 8 | a[3]);
    }
  }
  return ports;
}

pid_t start_rank(const test::TempDir& dir, int rank, const std::string& run, const std::string& args) {
  const std::string log = dir.file("rank" + std::to_string(rank) + ".log");
  const std::string cmd = "exec env OMT_RANK=" + std::to_string(rank) + " OMT_LOCAL_RANK=" + std::to_string(rank) +
                          " OMT_WORLD_SIZE=2 OMT_STORE=file:" + dir.file("store") + " OMT_RUN_ID=" + run +
                          " OMT_TIMEOUT_S=20 OMT_RUN_SECRET=" + kRunSecret + " " + test::tool_path() + " train " +
                          args + " > " + log + " 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

int exit_code_of(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Note [Mesh attempts]: a process outside the job that connects to the rendezvous ports first
// and sends random bytes takes those Gloo pairs; the ranks see it (within a quarter of
// --timeout), connect again on fresh ports, and the job trains to the same model as without
// it. Rank 1 is held (SIGSTOP) after joining, so that rank 0's ports are open and published
// before rank 1 connects.
TEST(TrainCli, AForeignConnectionToTheRendezvousPortsDoesNotFailTheJob) {
  test::TempDir dir;
  const std::string train = write_slice(dir, "train.npz", "train", 256);
  const std::string args = source_path("models/cnn.onnx") + " --data " + train +
                           " --steps 3 --global-batch 32 --replicas 1 --seed 3 --timeout 8 --output ";
  {
    test::TempDir ref;
    const auto ranks = run_ranks(ref, {args + dir.file("ref.onnx"), args + dir.file("ref.onnx")},
                                 {"OMT_RUN_SECRET=" + kRunSecret, "OMT_RUN_SECRET=" + kRunSecret});
    ASSERT_EQ(ranks[0].exit_code, 0) << ranks[0].output;
    ASSERT_EQ(ranks[1].exit_code, 0) << ranks[1].output;
  }
  const std::string run = "foreign" + std::to_string(getpid());
  const std::string join1 = dir.file("store/" + std::to_string(std::hash<std::string>{}("omt/" + run + "/gloo/join/1")));
  const pid_t r1 = start_rank(dir, 1, run, args + dir.file("attacked.onnx"));
  for (int i = 0; i < 3000 && !file_exists(join1); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(file_exists(join1)) << read_file_bytes(dir.file("rank1.log"));
  kill(r1, SIGSTOP);
  const pid_t r0 = start_rank(dir, 0, run, args + dir.file("attacked.onnx"));
  std::vector<int> ports;
  for (int i = 0; i < 3000 && ports.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ports = gloo_ports_in(dir.file("store"));
  }
  std::vector<int> foreign;  // held open until the job ends
  for (int port : ports) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) == 0) {
      std::string noise(512, '\0');
      for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 2654435761u) >> 13);
      EXPECT_EQ(send(fd, noise.data(), noise.size(), MSG_NOSIGNAL), static_cast<ssize_t>(noise.size()));
    }
    foreign.push_back(fd);
  }
  kill(r1, SIGCONT);
  const int rc0 = exit_code_of(r0), rc1 = exit_code_of(r1);
  for (int fd : foreign) close(fd);
  const std::string log0 = read_file_bytes(dir.file("rank0.log")), log1 = read_file_bytes(dir.file("rank1.log"));
  EXPECT_FALSE(ports.empty()) << log0;
  ASSERT_EQ(rc0, 0) << log0;
  ASSERT_EQ(rc1, 0) << log1;
  EXPECT_EQ(read_file_bytes(dir.file("attacked.onnx")), read_file_bytes(dir.file("ref.onnx")));
  std::cout << "foreign connections to " << ports.size() << " port(s); "
            << (log0.find("connection attempt 1 of 3 failed") != std::string::npos ? "" : "no ")
            << "reconnection needed\n";
}

}  // namespace
}  // namespace omt

namespace omt {
namespace {

TEST(TrainCli, CtrlCWritesACheckpointAndExitsCleanly) {
  test::TempDir dir;
  const std::string train = write_slice(dir, "train.npz", "train", 2048);
  const std::string cmd = test::tool_path() + " train " + source_path("models/mlp.onnx") + " --data " + train +
                          " --epochs 1000 --global-batch 64 --replicas 2 --checkpoint-dir " + dir.file("ck") + " > " +
                          dir.file("log.txt") + " 2>&1";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 300 && (!file_exists(dir.file("log.txt")) ||
                              read_file_bytes(dir.file("log.txt")).find("training ") == std::string::npos);
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string log = read_file_bytes(dir.file("log.txt"));
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 130) << log;
  EXPECT_NE(log.find("interrupted at step"), std::string::npos) << log;
  EXPECT_TRUE(file_exists(dir.file("ck/latest"))) << log;
  // The checkpoint resumes.
  const auto resumed = run_tool("train " + source_path("models/mlp.onnx") + " --data " + train +
                                " --epochs 1 --steps 5 --global-batch 64 --replicas 2 --resume " + dir.file("ck"));
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
}

}  // namespace
}  // namespace omt

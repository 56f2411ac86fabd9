// onnx-mirror-train on token data end to end: BERT-style several inputs and GPT-2 token
// labels against torch, nanoGPT token files (mapped, not read; the same losses as the .npz
// tokens), and the errors of token data. Label: slow.
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
#include "tests/e2e/cli_test_util.h"
#include "tests/test_util.h"

namespace omt {
namespace {

using e2e::expect_failure;
using e2e::parse_percent;
using e2e::write_slice;
using test::run_tool;
using test::source_path;

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
  // With its data the classifier trains, and says that its last block computes one position.
  const auto ok = run_tool("train " + bert + " --data " + source_path("tests/data/tokens/bert_data.npz") +
                           " --global-batch 8 --steps 1");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("nodes before it compute that position only"), std::string::npos) << ok.output;
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

}  // namespace
}  // namespace omt

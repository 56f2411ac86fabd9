// A model as torch.onnx (dynamo, opset 23) writes it with the standard Attention (GQA,
// is_causal), Einsum and Resize (bilinear) nodes, trained through onnx-mirror's gradient
// rules: loss and every parameter gradient against PyTorch 2.15 autograd
// (tests/reference/make_op_model.py), rtol 1e-4, atol 1e-5 as the other PyTorch references.
#include <gtest/gtest.h>

#include <cmath>

#include "graph/onnx_io.h"
#include "runtime/data/npy.h"
#include "runtime/trainer.h"
#include "tests/test_util.h"

namespace omt {
namespace {

TEST(OpModelReference, AttentionEinsumResizeGradientsMatchTorch) {
  const NamedTensors ref = read_npz(test::source_path("tests/reference/attention_einsum_resize.npz"));
  auto model = std::make_shared<const Model>(load_onnx(test::source_path("tests/reference/attention_einsum_resize.onnx")));
  TrainingSpec spec;
  spec.loss = parse_loss_kind("mse");
  spec.train_regex = "^(wq|wk|wv|w|conv\\..*)$";
  Trainer trainer(model, spec);
  NamedTensors inputs, grads;
  inputs.set("x", ref.at("feed/x"));
  inputs.set("img", ref.at("feed/img"));
  const float loss = trainer.gradients(inputs, ref.at("target"), &grads);
  const double want = ref.at("loss").value_as_double(0);
  EXPECT_NEAR(loss, want, 1e-5 + 1e-4 * std::fabs(want));
  int compared = 0;
  for (const auto& key : ref.names()) {
    if (key.rfind("grad/", 0) != 0) continue;
    const std::string name = key.substr(5);
    ASSERT_TRUE(grads.has(name)) << "onnx-mirror has no gradient for " << name;
    EXPECT_TRUE(test::tensors_close(grads.at(name), ref.at(key), 1e-4, 1e-5)) << key;
    ++compared;
  }
  EXPECT_EQ(compared, 6);
}

}  // namespace
}  // namespace omt

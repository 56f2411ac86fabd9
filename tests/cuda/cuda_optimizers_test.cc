// CudaOpTest cases of backends/cuda/optimizers/: the onnx-mirror optimizers and ONNX's training
// optimizers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace omt::test {

std::vector<OpCase> optimizer_cases() {
  std::vector<OpCase> cases;
  // Optimizers (in place on graph inputs; copies when the param is an initializer).
  {
    AttributeMap a;
    a.set("momentum", 0.9f);
    a.set("weight_decay", 0.01f);
    a.set("nesterov", int64_t{1});
    cases.push_back(OpCase{"SGD", "SGD", kMirror, a,
                           {scalar_f(0.1f), scalar_i(3), uniform({40, 3}, 161), uniform({40, 3}, 162), uniform({40, 3}, 163)},
                           {}, 2, 1e-5, 1e-6});
    AttributeMap p;
    cases.push_back(OpCase{"SGD_plain_constant_param", "SGD", kMirror, p,
                           {scalar_f(0.1f), scalar_i(1), uniform({40, 3}, 164), uniform({40, 3}, 165)},
                           {false, false, true, false}, 1, 1e-5, 1e-6});
    AttributeMap w;
    w.set("weight_decay", 0.05f);
    w.set("decoupled", int64_t{1});
    cases.push_back(OpCase{"Adam", "Adam", kMirror, w,
                           {scalar_f(0.01f), scalar_i(5), uniform({33, 4}, 166), uniform({33, 4}, 167), uniform({33, 4}, 168),
                            uniform({33, 4}, 169, 0.f, 1.f)},
                           {}, 3, 1e-5, 1e-6});
  }

  // ONNX's training optimizers (ai.onnx.preview.training), two optimized tensors where the
  // op is variadic.
  {
    const char* const kTraining = "ai.onnx.preview.training";
    AttributeMap m;
    m.set("alpha", 0.9f);
    m.set("beta", 0.1f);
    m.set("norm_coefficient", 0.01f);
    m.set("mode", std::string("standard"));
    cases.push_back(OpCase{"Momentum_standard", "Momentum", kTraining, m,
                           {scalar_f(0.1f), scalar_i(3), uniform({5, 3}, 361), uniform({7}, 362), uniform({5, 3}, 363),
                            uniform({7}, 364), uniform({5, 3}, 365), uniform({7}, 366)},
                           {}, 4, 1e-5, 1e-6});
    AttributeMap nm = m;
    nm.set("mode", std::string("nesterov"));
    cases.push_back(OpCase{"Momentum_nesterov_step0", "Momentum", kTraining, nm,
                           {scalar_f(0.05f), scalar_i(0), uniform({6, 4}, 367), uniform({6, 4}, 368), uniform({6, 4}, 369)},
                           {}, 2, 1e-5, 1e-6});
    AttributeMap ad;
    ad.set("alpha", 0.8f);
    ad.set("beta", 0.95f);
    ad.set("norm_coefficient", 0.02f);
    ad.set("norm_coefficient_post", 0.01f);
    ad.set("epsilon", 1e-5f);
    cases.push_back(OpCase{"Adam_onnx", "Adam", kTraining, ad,
                           {scalar_f(0.01f), scalar_i(4), uniform({9, 5}, 370), uniform({9, 5}, 371), uniform({9, 5}, 372),
                            uniform({9, 5}, 373, 0.f, 1.f)},
                           {}, 3, 1e-5, 1e-6});
    AttributeMap ag;
    ag.set("decay_factor", 0.1f);
    ag.set("norm_coefficient", 0.01f);
    cases.push_back(OpCase{"Adagrad", "Adagrad", kTraining, ag,
                           {Tensor::scalar<double>(0.1), scalar_i(2), as_double(uniform({4, 3}, 374)),
                            as_double(uniform({5}, 375)), as_double(uniform({4, 3}, 376)), as_double(uniform({5}, 377)),
                            as_double(uniform({4, 3}, 378, 0.f, 1.f)), as_double(uniform({5}, 379, 0.f, 1.f))},
                           {}, 4, 1e-9, 1e-12});
  }
  return cases;
}

}  // namespace omt::test

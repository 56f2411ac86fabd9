// The installed-package smoke test: load a model, predict on 2 replicas, fine-tune the last
// layer one step, see the change without a reload, save, and catch a typed error.
// Usage: consumer MODEL.onnx WORK_DIR. Exit 0 and "consumer OK" on success.
#include <onnx_mirror/onnx_mirror.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: consumer MODEL.onnx WORK_DIR\n";
    return 2;
  }
  try {
    onnx_mirror::Model model = onnx_mirror::Model::load(argv[1]);
    std::vector<float> pixels(4 * 28 * 28);
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i % 97) / 97.0f;
    const onnx_mirror::Tensor x = onnx_mirror::Tensor::from_vector(pixels, {4, 1, 28, 28});
    const onnx_mirror::Tensor y = onnx_mirror::Tensor::from_vector<int64_t>({1, 2, 3, 4}, {4});
    const onnx_mirror::Tensor before = model.predict(x, 2);
    if (before.shape() != onnx_mirror::Shape{4, 10}) throw std::runtime_error("wrong output shape " + before.describe());

    onnx_mirror::TrainerOptions options;
    options.replicas = 2;
    options.lr = 0.1f;
    options.train_regex = "fc3\\.";
    onnx_mirror::Trainer trainer(model, options);
    const double loss = trainer.step(x, y);
    const onnx_mirror::Tensor after = model.predict(x, 2);
    if (std::memcmp(before.raw(), after.raw(), before.nbytes()) == 0)
      throw std::runtime_error("predict did not see the fine-tune step");
    model.save(std::string(argv[2]) + "/consumer.onnx");

    try {
      onnx_mirror::Model::load(std::string(argv[2]) + "/missing.onnx");
      throw std::runtime_error("loading a missing file did not throw");
    } catch (const onnx_mirror::Error& e) {
      if (e.kind() != onnx_mirror::ErrorKind::kIo) throw std::runtime_error("wrong error kind");
    }
    std::cout << "consumer OK: loss " << loss << ", trained " << trainer.trainable().size() << " parameters\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "consumer failed: " << e.what() << "\n";
    return 1;
  }
}

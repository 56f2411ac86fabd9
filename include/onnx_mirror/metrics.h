// onnx_mirror::ConfusionMatrix: counts of (true class, predicted class) pairs from an
// evaluation, and their classification report. A plain value with no synchronisation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace onnx_mirror {

class ConfusionMatrix {
 public:
  ConfusionMatrix() = default;  // 0 classes: nothing was scored
  explicit ConfusionMatrix(int64_t num_classes);

  int64_t num_classes() const { return num_classes_; }
  // Samples of true class `true_class` predicted as `predicted` (row = true class).
  // kInvalidArgument when a class is outside [0, num_classes()).
  int64_t count(int64_t true_class, int64_t predicted) const;
  void add(int64_t true_class, int64_t predicted, int64_t n = 1);
  int64_t total() const;
  double accuracy() const;  // 0 when empty

  // Per-class precision, recall, F1 and support (scikit-learn's layout), then the matrix.
  // `class_names` label the rows and columns; missing names print as the class number.
  std::string format(const std::vector<std::string>& class_names = {}) const;

 private:
  int64_t num_classes_ = 0;
  std::vector<int64_t> counts_;  // row-major [true][predicted]
};

}  // namespace onnx_mirror

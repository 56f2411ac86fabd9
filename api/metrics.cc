// ConfusionMatrix: counts kept here, formatted by the runtime's ConfusionMatrix so the text
// is the same one `train` prints.
#include "onnx_mirror/metrics.h"

#include "api/internal.h"
#include "runtime/metrics.h"

namespace onnx_mirror {

ConfusionMatrix::ConfusionMatrix(int64_t num_classes) {
  if (num_classes < 0)
    throw Error(ErrorKind::kInvalidArgument,
                "ConfusionMatrix needs a class count >= 0, got " + std::to_string(num_classes));
  num_classes_ = num_classes;
  counts_.assign(static_cast<size_t>(num_classes * num_classes), 0);
}

int64_t ConfusionMatrix::count(int64_t true_class, int64_t predicted) const {
  if (true_class < 0 || true_class >= num_classes_ || predicted < 0 || predicted >= num_classes_)
    throw Error(ErrorKind::kInvalidArgument, "ConfusionMatrix::count(" + std::to_string(true_class) + ", " +
                                                 std::to_string(predicted) + ") is outside its " +
                                                 std::to_string(num_classes_) + " classes");
  return counts_[static_cast<size_t>(true_class * num_classes_ + predicted)];
}

void ConfusionMatrix::add(int64_t true_class, int64_t predicted, int64_t n) {
  count(true_class, predicted);  // range check
  counts_[static_cast<size_t>(true_class * num_classes_ + predicted)] += n;
}

int64_t ConfusionMatrix::total() const {
  int64_t sum = 0;
  for (int64_t c : counts_) sum += c;
  return sum;
}

double ConfusionMatrix::accuracy() const {
  const int64_t n = total();
  if (n == 0) return 0;
  int64_t correct = 0;
  for (int64_t c = 0; c < num_classes_; ++c) correct += counts_[static_cast<size_t>(c * num_classes_ + c)];
  return static_cast<double>(correct) / static_cast<double>(n);
}

std::string ConfusionMatrix::format(const std::vector<std::string>& class_names) const {
  return detail::guarded([&] {
    if (num_classes_ == 0) return omt::ConfusionMatrix().format(class_names);
    omt::ConfusionMatrix m(num_classes_);
    for (int64_t t = 0; t < num_classes_; ++t)
      for (int64_t p = 0; p < num_classes_; ++p)
        if (const int64_t k = counts_[static_cast<size_t>(t * num_classes_ + p)]) m.add_pair(t, p, k);
    return m.format(class_names);
  });
}

}  // namespace onnx_mirror

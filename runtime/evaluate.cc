#include "runtime/evaluate.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace omt {

void ClassScores::add(const Tensor& scores, const Tensor& labels, int64_t class_axis, int64_t ignore_index,
                      ConfusionMatrix* confusion) {
  const int64_t rank = scores.defined() ? scores.rank() : 0;
  const int64_t axis = class_axis < 0 ? class_axis + rank : class_axis;
  if (!scored || rank < 2 || scores.dtype() != DType::kFloat32 || axis < 1 || axis >= rank ||
      labels.dtype() != DType::kInt64 || scores.dim(axis) == 0 || scores.numel() / scores.dim(axis) != labels.numel()) {
    scored = false;
    return;
  }
  const int64_t c = scores.dim(axis);
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < rank; ++d) inner *= scores.dim(d);
  const int64_t outer = scores.numel() / (c * inner);
  if (confusion && rank == 2 && confusion->num_classes() == 0) *confusion = ConfusionMatrix(c);
  const float* p = scores.data<float>();
  const int64_t* y = labels.data<int64_t>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t label = y[o * inner + i];
      if (label == ignore_index) continue;
      OMT_CHECK(label >= 0 && label < c, kInvalidArgument, "label ", label, " at position ", o * inner + i,
                " is outside the ", c, " classes of the scores ", scores.describe());
      const float* row = p + o * c * inner + i;
      int64_t best = 0;
      float mx = row[0];
      for (int64_t k = 1; k < c; ++k)
        if (row[k * inner] > mx) mx = row[k * inner], best = k;
      double sum = 0;
      for (int64_t k = 0; k < c; ++k) sum += std::exp(static_cast<double>(row[k * inner]) - mx);
      loss += mx + std::log(sum) - row[label * inner];
      correct += best == label;
      ++counted;
      if (confusion && rank == 2) confusion->add_pair(label, best);
    }
}

void RegressionSums::add(const Tensor& out, const Tensor& y, bool with_bce) {
  OMT_CHECK(out.numel() == y.numel(), kInvalidArgument, "the model output is ", out.describe(),
            " but the targets are ", y.describe(), "; they must hold the same values per sample");
  const int64_t k = out.numel();
  if (out.dtype() == DType::kFloat32 && y.dtype() == DType::kFloat32 && !with_bce) {
    const float* p = out.data<float>();
    const float* t = y.data<float>();
    double sq = 0, ab = 0;
    for (int64_t i = 0; i < k; ++i) {
      const double d = static_cast<double>(p[i]) - static_cast<double>(t[i]);
      sq += d * d;
      ab += std::fabs(d);
    }
    squared += sq;
    absolute += ab;
  } else {
    for (int64_t i = 0; i < k; ++i) {
      const double x = out.value_as_double(i), t = y.value_as_double(i), d = x - t;
      squared += d * d;
      absolute += std::fabs(d);
      if (with_bce) bce += std::max(x, 0.0) - x * t + std::log1p(std::exp(-std::fabs(x)));
    }
  }
  count += k;
}

EvalResult evaluate(Predictor& predictor, const NamedTensors& inputs, const Tensor& labels, int64_t chunk,
                    const EvalTarget& target) {
  return evaluate([&](const NamedTensors& feeds) { return predictor.run(feeds); }, inputs, labels, chunk, target);
}

EvalResult evaluate(Predictor& predictor, const std::string& input_name, const Tensor& features,
                    const Tensor& labels, int64_t chunk, const EvalTarget& target) {
  return evaluate([&](const NamedTensors& feeds) { return predictor.run(feeds); }, input_name, features, labels,
                  chunk, target);
}

EvalResult evaluate(const PredictFn& predict, const std::string& input_name, const Tensor& features,
                    const Tensor& labels, int64_t chunk, const EvalTarget& target) {
  NamedTensors inputs;
  inputs.set(input_name, features);
  return evaluate(predict, inputs, labels, chunk, target);
}

namespace {

// evaluate over n rows whose feeds and labels `rows_of(b, e)` gives chunk by chunk.
using ChunkFn = std::function<std::pair<NamedTensors, Tensor>(int64_t begin, int64_t end)>;
EvalResult evaluate_chunks(const PredictFn& predict, int64_t n, bool regression, int64_t label_rank, const ChunkFn& rows_of,
                           int64_t chunk, const EvalTarget& target) {
  OMT_CHECK(chunk >= 1, kInvalidArgument, "the evaluation batch must be at least 1, got ", chunk);
  EvalResult r;
  r.regression = regression;
  ClassScores scores;
  RegressionSums sums;
  for (int64_t b = 0; b < n; b += chunk) {
    const int64_t e = std::min(n, b + chunk);
    const auto [feeds, y] = rows_of(b, e);
    const NamedTensors out = predict(feeds);
    const Tensor& logits = out.at(target.output.empty() ? out.names()[0] : target.output);
    if (r.regression)
      sums.add(logits, y, target.loss == LossKind::kBceWithLogits);
    else
      scores.add(logits, y, target.class_axis, target.ignore_index, &r.confusion);
  }
  r.samples = n;
  if (r.regression) {
    const double count = static_cast<double>(sums.count);
    r.mse = sums.count ? sums.squared / count : NAN;
    r.mae = sums.count ? sums.absolute / count : NAN;
    r.loss = target.loss == LossKind::kL1 ? r.mae
             : target.loss == LossKind::kBceWithLogits ? (sums.count ? sums.bce / count : NAN)
                                                       : r.mse;
    r.accuracy = NAN;
    return r;
  }
  r.tokens = label_rank >= 2;
  if (!scores.scored || r.tokens) r.confusion = ConfusionMatrix();
  r.positions = scores.counted;
  r.loss = scores.scored && scores.counted ? scores.loss / static_cast<double>(scores.counted) : NAN;
  r.accuracy = scores.counted ? static_cast<double>(scores.correct) / static_cast<double>(scores.counted) : 0;
  if (r.tokens) r.perplexity = std::exp(r.loss);
  return r;
}

}  // namespace

EvalResult evaluate(const PredictFn& predict, const NamedTensors& inputs, const Tensor& labels, int64_t chunk,
                    const EvalTarget& target) {
  OMT_CHECK(inputs.size() > 0, kInvalidArgument, "evaluate needs the model's inputs");
  const int64_t n = inputs.at(inputs.names()[0]).dim(0);
  return evaluate_chunks(
      predict, n, dtype_is_float(labels.dtype()), labels.rank(),
      [&](int64_t b, int64_t e) {
        NamedTensors feeds;
        for (const auto& name : inputs.names())
          feeds.set(name, n > chunk ? slice_rows(inputs.at(name), b, e) : inputs.at(name));
        return std::make_pair(feeds, n > chunk ? slice_rows(labels, b, e) : labels);
      },
      chunk, target);
}

EvalResult evaluate(const PredictFn& predict, const InputSources& inputs, const LabelSource& labels, int64_t chunk,
                    const EvalTarget& target) {
  OMT_CHECK(!inputs.names().empty(), kInvalidArgument, "evaluate needs the model's inputs");
  return evaluate_chunks(
      predict, inputs.size(), dtype_is_float(labels.dtype()), labels.rank(),
      [&](int64_t b, int64_t e) {
        std::vector<int64_t> rows(static_cast<size_t>(e - b));
        for (int64_t i = b; i < e; ++i) rows[static_cast<size_t>(i - b)] = i;
        return std::make_pair(inputs.gather(rows), labels.gather(rows));
      },
      chunk, target);
}

}  // namespace omt

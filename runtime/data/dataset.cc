#include "runtime/data/dataset.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/file_util.h"
#include "runtime/data/idx.h"
#include "runtime/data/npy.h"

namespace omt {
namespace {

// One label array of `source` checked against `samples` feature rows: integers become int64
// class labels [N]; floats stay as stored, as regression targets [N, ...].
Tensor read_labels(const Tensor& t, const std::string& name, const std::string& source, int64_t samples,
                   const std::string& features) {
  const std::string where = "'" + source + "': ";
  if (dtype_is_integer(t.dtype())) {
    const bool one_per_sample = t.rank() == 1 || (t.rank() >= 1 && t.numel() == t.dim(0));
    OMT_CHECK(one_per_sample && t.dim(0) == samples, kInvalidArgument, where, "label array '", name, "' is ",
              t.describe(), " but feature array '", features, "' holds ", samples,
              " samples. Integer arrays are class labels, one per sample ([", samples, "] or [", samples,
              ",1]); store regression targets as floats (numpy: y.astype(np.float32)).");
    Tensor out = Tensor::empty(DType::kInt64, {t.numel()});
    int64_t* p = out.data<int64_t>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<int64_t>(t.value_as_double(i));
    return out;
  }
  OMT_CHECK(dtype_is_float(t.dtype()), kInvalidArgument, where, "label array '", name, "' is ", t.describe(),
            "; labels must be integer class indices or float regression targets. Convert the array.");
  OMT_CHECK(t.rank() >= 1, kInvalidArgument, where, "target array '", name, "' is a scalar (", t.describe(),
            "); targets need the samples along dimension 0, [", samples, "] or [", samples, ", ...].");
  OMT_CHECK(t.dim(0) == samples, kInvalidArgument, where, "target array '", name, "' is ", t.describe(), " (",
            t.dim(0), " samples) but feature array '", features, "' holds ", samples,
            " samples; both need the samples along dimension 0. Write arrays with the same samples.");
  return t;
}

Dataset load_idx_pair(const std::string& images, const std::string& labels, const std::string& source) {
  Dataset d;
  d.source = source;
  d.feature_name = "images";
  d.label_name = "labels";
  d.features = read_idx(images);
  OMT_CHECK(d.features.rank() >= 1, kInvalidArgument, "'", images, "' holds a scalar, not samples");
  d.labels = read_labels(read_idx(labels), labels, labels, d.features.dim(0), images);
  return d;
}

}  // namespace

std::string fashion_mnist_dir() {
  const char* env = std::getenv("OMT_FASHION_MNIST_DIR");
  return env && *env ? env : "/usr/share/datasets/fashion-mnist";
}

Dataset load_dataset(const std::string& spec, const std::string& labels_name,
                     const std::string& features_name) {
  if (spec.rfind("fashion-mnist", 0) == 0) {
    std::string split = spec.size() > 13 && spec[13] == ':' ? spec.substr(14) : "train";
    OMT_CHECK(split == "train" || split == "test", kInvalidArgument, "unknown split '", split,
              "' in '", spec, "'; use fashion-mnist:train or fashion-mnist:test");
    const std::string dir = fashion_mnist_dir();
    const std::string prefix = dir + "/" + (split == "train" ? "train" : "t10k");
    return load_idx_pair(prefix + "-images-idx3-ubyte.gz", prefix + "-labels-idx1-ubyte.gz", spec);
  }
  const auto comma = spec.find(',');
  if (comma != std::string::npos) return load_idx_pair(spec.substr(0, comma), spec.substr(comma + 1), spec);

  const NamedTensors arrays = read_arrays(spec);
  Dataset d;
  d.source = spec;
  if (!features_name.empty()) {
    OMT_CHECK(arrays.has(features_name), kInvalidArgument, "'", spec, "' has no array named '",
              features_name, "'");
    d.feature_name = features_name;
  } else {
    std::vector<std::string> features;
    for (const auto& n : arrays.names())
      if (n != labels_name) features.push_back(n);
    if (features.size() > 1) {
      std::string all;
      for (const auto& n : features) all += (all.empty() ? "'" : ", '") + n + "'";
      OMT_FAIL(kInvalidArgument, "'", spec, "' holds several feature arrays (", all,
               "); name the one to use. A model with several inputs cannot be trained from the "
               "command line yet (predict feeds each input from the array of its name).");
    }
    if (!features.empty()) d.feature_name = features[0];
    OMT_CHECK(!d.feature_name.empty(), kInvalidArgument, "'", spec, "' holds no feature array");
  }
  d.features = arrays.at(d.feature_name);
  OMT_CHECK(d.features.rank() >= 1, kInvalidArgument, "'", spec, "': feature array '", d.feature_name, "' is ",
            d.features.describe(), "; features need the samples along dimension 0");
  if (arrays.has(labels_name)) {
    d.label_name = labels_name;
    d.labels = read_labels(arrays.at(labels_name), labels_name, spec, d.features.dim(0), d.feature_name);
  }
  return d;
}

namespace {

// The shape prepare_features gives `features` for `input` (Note in dataset.h).
Shape prepared_shape(const Tensor& features, const ValueInfo& input) {
  const int64_t n = features.dim(0);
  const int64_t per_sample = n ? features.numel() / n : 0;
  Shape target = {n};
  if (!input.shape) return features.shape();
  OMT_CHECK(!input.shape->empty(), kInvalidArgument, "model input '", input.name,
            "' is a scalar; it cannot take a batch of samples");
  int64_t known = 1;
  int unknown = 0;
  for (size_t d = 1; d < input.shape->size(); ++d) {
    const Dim& dim = (*input.shape)[d];
    target.push_back(dim.is_fixed() ? dim.value : -1);
    if (dim.is_fixed()) known *= dim.value; else ++unknown;
  }
  if (unknown == 1 && known > 0 && per_sample % known == 0) {
    for (auto& d : target)
      if (d < 0) d = per_sample / known;
    return target;
  }
  if (unknown != 0) return features.shape();
  OMT_CHECK(known == per_sample, kInvalidArgument, "model input '", input.name, "' expects ",
            input.shape_str(), " (", known, " values per sample) but the data has samples of ",
            shape_str(Shape(features.shape().begin() + 1, features.shape().end())), " (",
            per_sample, " values). Use a model made for this data or reshape the data.");
  return target;
}

DType prepared_dtype(const ValueInfo& input) {
  return input.dtype == DType::kUndefined ? DType::kFloat32 : input.dtype;
}

// Converts n stored values to float32 model input: (x * scale - mean) / std.
struct Converter {
  float scale, mean, inv_std;
  Converter(const Tensor& features, const Preprocess& pre)
      : scale(pre.scale && dtype_is_integer(features.dtype()) ? 1.0f / 255.0f : 1.0f),
        mean(pre.mean),
        inv_std(1.0f / pre.std) {}
  void operator()(const uint8_t* src, float* dst, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) dst[i] = (src[i] * scale - mean) * inv_std;
  }
};

// Reuses `reuse` for a result of dtype and shape when nobody else holds it.
Tensor output_like(DType dtype, const Shape& shape, Tensor reuse) {
  if (reuse.defined() && reuse.sole_owner() && reuse.dtype() == dtype && reuse.shape() == shape) return reuse;
  return Tensor::empty(dtype, shape);
}

// Copies rows `rows` of `row` bytes each from src through `copy(src_row, i)`. Rows are
// scattered over the data set, so each is a trip to memory; the first 256 KB of them are
// requested at once and then one more as each is copied, so that many are in flight (a
// 128-row batch of 784-byte rows: 22 us against 41 with two rows ahead, measured).
template <class Copy>
void for_each_row_prefetched(const char* src, const std::vector<int64_t>& rows, size_t row, Copy&& copy) {
  constexpr size_t kLine = 64, kWindowBytes = 256 << 10;
  const size_t ahead = std::max<size_t>(2, row ? kWindowBytes / row : 2);
  auto prefetch = [&](size_t i) {
    for (size_t b = 0; b < row; b += kLine) __builtin_prefetch(src + static_cast<size_t>(rows[i]) * row + b);
  };
  for (size_t i = 0; i < rows.size() && i < ahead; ++i) prefetch(i);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i + ahead < rows.size()) prefetch(i + ahead);
    copy(src + static_cast<size_t>(rows[i]) * row, i);
  }
}

}  // namespace

Tensor prepare_features(const Tensor& features, const ValueInfo& input, const Preprocess& pre) {
  const Shape target = prepared_shape(features, input);
  const DType want = prepared_dtype(input);
  if (want != DType::kFloat32) {
    OMT_CHECK(features.dtype() == want, kInvalidArgument, "model input '", input.name, "' is ",
              dtype_name(want), " but the data is ", features.describe(),
              "; convert the data to ", dtype_name(want));
    return features.reshaped(target);
  }
  Tensor out = Tensor::empty(want, target);
  const int64_t total = features.numel();
  float* dst = out.data<float>();
  const Converter convert(features, pre);
  if (features.dtype() == DType::kUInt8) {
    convert(features.data<uint8_t>(), dst, total);
  } else {
    for (int64_t i = 0; i < total; ++i)
      dst[i] = (static_cast<float>(features.value_as_double(i)) * convert.scale - convert.mean) * convert.inv_std;
  }
  return out;
}

FeatureSource::FeatureSource(const Tensor& features, const ValueInfo& input, const Preprocess& pre)
    : pre_(pre) {
  if (features.dtype() == DType::kUInt8 && prepared_dtype(input) == DType::kFloat32) {
    stored_ = features;
    shape_ = prepared_shape(features, input);
    convert_ = true;
  } else {
    stored_ = prepare_features(features, input, pre);
    shape_ = stored_.shape();
  }
}

Tensor FeatureSource::gather(const std::vector<int64_t>& rows, Tensor reuse) const {
  if (!convert_) return gather_rows(stored_, rows, std::move(reuse));
  Shape shape = shape_;
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out = output_like(DType::kFloat32, shape, std::move(reuse));
  const int64_t row = size() ? stored_.numel() / size() : 0;
  const uint8_t* src = stored_.data<uint8_t>();
  float* dst = out.data<float>();
  const Converter convert(stored_, pre_);
  for_each_row_prefetched(reinterpret_cast<const char*>(src), rows, static_cast<size_t>(row),
                          [&](const char* from, size_t i) {
                            convert(reinterpret_cast<const uint8_t*>(from), dst + static_cast<int64_t>(i) * row, row);
                          });
  return out;
}

Tensor FeatureSource::all() const {
  if (!convert_) return stored_;
  std::vector<int64_t> rows(static_cast<size_t>(size()));
  for (int64_t i = 0; i < size(); ++i) rows[static_cast<size_t>(i)] = i;
  return gather(rows);
}

Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& rows, Tensor reuse) {
  Shape shape = t.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out = output_like(t.dtype(), shape, std::move(reuse));
  const size_t row = t.dim(0) ? t.nbytes() / static_cast<size_t>(t.dim(0)) : 0;
  char* dst = static_cast<char*>(out.raw());
  const char* src = static_cast<const char*>(t.raw());
  for_each_row_prefetched(src, rows, row, [&](const char* from, size_t i) { std::memcpy(dst + i * row, from, row); });
  return out;
}

Tensor prepare_targets(const Tensor& targets, const ValueInfo& output, DType dtype, const std::string& what) {
  OMT_CHECK(targets.rank() >= 1, kInvalidArgument, what, " is a scalar (", targets.describe(),
            "); targets need the samples along dimension 0");
  OMT_CHECK(dtype_is_float(targets.dtype()) || dtype_is_integer(targets.dtype()), kInvalidArgument, what, " is ",
            targets.describe(), "; regression targets must be numbers. Convert the array to ", dtype_name(dtype), ".");
  const int64_t n = targets.dim(0);
  Shape target = targets.shape();
  if (output.shape && !output.shape->empty()) {
    Shape sample;
    bool known = true;
    for (size_t d = 1; d < output.shape->size(); ++d) {
      known = known && (*output.shape)[d].is_fixed();
      sample.push_back((*output.shape)[d].value);
    }
    if (known) {
      const int64_t want = shape_numel(sample);
      const int64_t have = n ? targets.numel() / n : shape_numel(Shape(target.begin() + 1, target.end()));
      OMT_CHECK(want == have, kInvalidArgument, what, " has samples of ", shape_str(Shape(target.begin() + 1, target.end())),
                " (", have, " values) but the model output '", output.name, "' is ", output.shape_str(), " (", want,
                " values per sample); the loss compares them element by element. Use targets shaped like the "
                "output, or pick the output with --model-output.");
      target = {n};
      target.insert(target.end(), sample.begin(), sample.end());
    }
  }
  if (targets.dtype() == dtype) return targets.reshaped(target);
  OMT_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64, kInvalidArgument, "the model output '",
            output.name, "' is ", dtype_name(dtype), "; regression targets are converted to float32 or float64 only");
  Tensor out = Tensor::empty(dtype, target);
  const int64_t total = targets.numel();
  if (dtype == DType::kFloat32) {
    float* dst = out.data<float>();
    for (int64_t i = 0; i < total; ++i) dst[i] = static_cast<float>(targets.value_as_double(i));
  } else {
    double* dst = out.data<double>();
    for (int64_t i = 0; i < total; ++i) dst[i] = targets.value_as_double(i);
  }
  return out;
}

}  // namespace omt

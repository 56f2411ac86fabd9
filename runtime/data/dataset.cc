#include "runtime/data/dataset.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/file_util.h"
#include "runtime/data/idx.h"
#include "runtime/data/npy.h"
#include "runtime/data/token_file.h"

namespace omt {
namespace {

// One label array of `source` checked against `samples` feature rows: integers become int64
// class labels [N]; floats stay as stored, as regression targets [N, ...].
Tensor read_labels(const Tensor& t, const std::string& name, const std::string& source, int64_t samples,
                   const std::string& features) {
  const std::string where = "'" + source + "': ";
  if (dtype_is_integer(t.dtype())) {
    OMT_CHECK(t.rank() >= 1 && t.dim(0) == samples, kInvalidArgument, where, "label array '", name, "' is ",
              t.describe(), " but feature array '", features, "' holds ", samples,
              " samples. Integer arrays are class labels with the samples along dimension 0: one per sample ([",
              samples, "]) or one per position ([", samples,
              ", T] token labels); store regression targets as floats (numpy: y.astype(np.float32)).");
    const bool one_per_sample = t.numel() == t.dim(0);
    Shape shape = one_per_sample ? Shape{t.dim(0)} : t.shape();
    if (t.dtype() == DType::kInt64) return t.reshaped(shape);
    Tensor out = Tensor::empty(DType::kInt64, shape);
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
  d.label_name = "labels";
  const Tensor x = read_idx(images);
  OMT_CHECK(x.rank() >= 1, kInvalidArgument, "'", images, "' holds a scalar, not samples");
  d.features.set("images", x);
  d.labels = read_labels(read_idx(labels), labels, labels, x.dim(0), images);
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
  if (!features_name.empty())
    OMT_CHECK(arrays.has(features_name), kInvalidArgument, "'", spec, "' has no array named '", features_name, "'");
  std::string first;
  for (const auto& n : arrays.names()) {
    if (n == labels_name || (!features_name.empty() && n != features_name)) continue;
    const Tensor& t = arrays.at(n);
    OMT_CHECK(t.rank() >= 1, kInvalidArgument, "'", spec, "': feature array '", n, "' is ", t.describe(),
              "; features need the samples along dimension 0");
    if (first.empty()) first = n;
    OMT_CHECK(t.dim(0) == arrays.at(first).dim(0), kInvalidArgument, "'", spec, "': feature array '", n, "' is ",
              t.describe(), " but '", first, "' is ", arrays.at(first).describe(),
              "; every array needs the same samples along dimension 0");
    d.features.set(n, t);
  }
  OMT_CHECK(!first.empty(), kInvalidArgument, "'", spec, "' holds no feature array",
            arrays.has(labels_name) ? str_cat(" besides the labels '", labels_name, "'") : std::string());
  if (arrays.has(labels_name)) {
    d.label_name = labels_name;
    d.labels = read_labels(arrays.at(labels_name), labels_name, spec, d.size(), first);
  }
  return d;
}

const Tensor& Dataset::only_features() const {
  if (features.size() == 1) return features.at(features.names()[0]);
  std::string all;
  for (const auto& n : features.names()) all += (all.empty() ? "'" : ", '") + n + "'";
  OMT_FAIL(kInvalidArgument, "'", source, "' holds ", features.size(), " feature arrays (", all,
           "); this needs exactly one");
}

namespace {
std::string describe_input(const ValueInfo& v) {
  return str_cat("'", v.name, "' (", v.dtype == DType::kUndefined ? "?" : dtype_name(v.dtype), " ", v.shape_str(), ")");
}
std::string array_list(const NamedTensors& arrays) {
  std::string all;
  for (const auto& n : arrays.names()) all += str_cat(all.empty() ? "" : ", ", "'", n, "' ", arrays.at(n).describe());
  return all.empty() ? "none" : all;
}
}  // namespace

NamedTensors bind_inputs(const Dataset& data, const std::vector<ValueInfo>& inputs, const InputMap& map) {
  for (const auto& [input, array] : map) {
    const bool known = std::any_of(inputs.begin(), inputs.end(), [&](const ValueInfo& v) { return v.name == input; });
    if (!known) {
      std::string names;
      for (const auto& v : inputs) names += (names.empty() ? "" : ", ") + describe_input(v);
      OMT_FAIL(kInvalidArgument, "--input ", input, "=", array, ": the model has no input '", input,
               "'; its inputs are ", names);
    }
    OMT_CHECK(data.features.has(array), kInvalidArgument, "--input ", input, "=", array, ": '", data.source,
              "' has no feature array '", array, "'; its arrays are ", array_list(data.features),
              data.label_name == array ? " ('" + array + "' holds the labels)" : std::string());
  }
  NamedTensors bound;
  std::vector<std::string> missing;
  for (const auto& v : inputs) {
    const auto it = map.find(v.name);
    if (it != map.end())
      bound.set(v.name, data.features.at(it->second));
    else if (data.features.has(v.name))
      bound.set(v.name, data.features.at(v.name));
    else if (inputs.size() == 1 && data.features.size() == 1)
      bound.set(v.name, data.features.at(data.features.names()[0]));
    else
      missing.push_back(describe_input(v));
  }
  if (!missing.empty()) {
    std::string names;
    for (const auto& m : missing) names += (names.empty() ? "" : ", ") + m;
    OMT_FAIL(kInvalidArgument, "'", data.source, "' has no array for model input", missing.size() > 1 ? "s " : " ",
             names, ". Its feature arrays are ", array_list(data.features),
             ". Name each array after its input, or map it with --input INPUT=ARRAY.");
  }
  for (const auto& v : inputs) check_token_seq_len(data, v, bound.at(v.name));  // Note [Token files]
  return bound;
}

void parse_input_mapping(const std::string& text, InputMap& map) {
  const auto eq = text.find('=');
  OMT_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < text.size(), kInvalidArgument, "--input '", text,
            "' is not INPUT=ARRAY (a model input name, '=', an array name in the data)");
  const std::string input = text.substr(0, eq);
  OMT_CHECK(!map.count(input), kInvalidArgument, "--input names model input '", input, "' twice");
  map[input] = text.substr(eq + 1);
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
    if (features.dtype() == want) return features.reshaped(target);
    // Token ids and masks stored as another integer type (uint16 token files, int32 arrays).
    OMT_CHECK(dtype_is_integer(want) && dtype_is_integer(features.dtype()) && want != DType::kBool &&
                  features.dtype() != DType::kBool,
              kInvalidArgument, "model input '", input.name, "' is ", dtype_name(want), " but the data is ",
              features.describe(), "; convert the data to ", dtype_name(want));
    Tensor out = Tensor::empty(want, target);
    const double lo = want == DType::kInt32 ? -2147483648.0 : want == DType::kInt64 ? -9.3e18 : -1e300;
    const double hi = want == DType::kInt32 ? 2147483647.0 : want == DType::kInt64 ? 9.3e18 : 1e300;
    for (int64_t i = 0; i < features.numel(); ++i) {
      const double v = features.value_as_double(i);
      OMT_CHECK(v >= lo && v <= hi, kInvalidArgument, "model input '", input.name, "' is ", dtype_name(want),
                " but value ", v, " at position ", i, " of the data does not fit it");
      if (want == DType::kInt64) out.data<int64_t>()[i] = static_cast<int64_t>(v);
      else if (want == DType::kInt32) out.data<int32_t>()[i] = static_cast<int32_t>(v);
      else OMT_FAIL(kInvalidArgument, "model input '", input.name, "' is ", dtype_name(want), " but the data is ",
                    features.describe(), "; convert the data to ", dtype_name(want));
    }
    return out;
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

namespace {

// True when every value of integer type `from` is one of `to` (so a row converts without a
// range check).
bool widens_exactly(DType from, DType to) {
  const auto bits = [](DType d) { return static_cast<int>(dtype_size(d)) * 8; };
  if (!dtype_is_integer(from) || !dtype_is_integer(to) || from == DType::kBool || to == DType::kBool || from == to)
    return false;
  if (to != DType::kInt64 && to != DType::kInt32) return false;
  const bool from_unsigned = from == DType::kUInt8 || from == DType::kUInt16 || from == DType::kUInt32 ||
                             from == DType::kUInt64;
  return from_unsigned ? bits(from) < bits(to) : bits(from) <= bits(to);
}

template <class From, class To>
void widen_row(const char* src, To* dst, int64_t n) {
  const From* s = reinterpret_cast<const From*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<To>(s[i]);
}

template <class To>
void widen_row(DType from, const char* src, To* dst, int64_t n) {
  switch (from) {
    case DType::kUInt8: return widen_row<uint8_t>(src, dst, n);
    case DType::kInt8: return widen_row<int8_t>(src, dst, n);
    case DType::kUInt16: return widen_row<uint16_t>(src, dst, n);
    case DType::kInt16: return widen_row<int16_t>(src, dst, n);
    case DType::kUInt32: return widen_row<uint32_t>(src, dst, n);
    case DType::kInt32: return widen_row<int32_t>(src, dst, n);
    default: OMT_ASSERT(false, "no widening from ", dtype_name(from));
  }
}

}  // namespace

FeatureSource::FeatureSource(const Tensor& features, const ValueInfo& input, const Preprocess& pre)
    : pre_(pre) {
  if (features.dtype() == DType::kUInt8 && prepared_dtype(input) == DType::kFloat32) {
    stored_ = features;
    shape_ = prepared_shape(features, input);
    convert_ = true;
  } else if (widens_exactly(features.dtype(), prepared_dtype(input))) {
    stored_ = features;
    shape_ = prepared_shape(features, input);
    widen_ = prepared_dtype(input);
  } else {
    stored_ = prepare_features(features, input, pre);
    shape_ = stored_.shape();
  }
}

Tensor FeatureSource::gather(const std::vector<int64_t>& rows, Tensor reuse) const {
  Shape shape = shape_;
  shape[0] = static_cast<int64_t>(rows.size());
  const int64_t row = size() ? stored_.numel() / size() : 0;
  if (widen_ != DType::kUndefined) {
    Tensor out = output_like(widen_, shape, std::move(reuse));
    const size_t row_bytes = static_cast<size_t>(row) * dtype_size(stored_.dtype());
    for_each_row_prefetched(static_cast<const char*>(stored_.raw()), rows, row_bytes, [&](const char* from, size_t i) {
      if (widen_ == DType::kInt64)
        widen_row(stored_.dtype(), from, out.data<int64_t>() + static_cast<int64_t>(i) * row, row);
      else
        widen_row(stored_.dtype(), from, out.data<int32_t>() + static_cast<int64_t>(i) * row, row);
    });
    return out;
  }
  if (!convert_) return gather_rows(stored_, rows, std::move(reuse));
  Tensor out = output_like(DType::kFloat32, shape, std::move(reuse));
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
  if (!convert_ && widen_ == DType::kUndefined) return stored_;
  std::vector<int64_t> rows(static_cast<size_t>(size()));
  for (int64_t i = 0; i < size(); ++i) rows[static_cast<size_t>(i)] = i;
  return gather(rows);
}

InputSources::InputSources(const NamedTensors& bound, const std::vector<ValueInfo>& inputs, const Preprocess& pre) {
  for (const auto& v : inputs) {
    names_.push_back(v.name);
    sources_.emplace_back(bound.at(v.name), v, pre);
    OMT_CHECK(sources_.back().size() == sources_[0].size(), kInvalidArgument, "the array for model input '", v.name,
              "' holds ", sources_.back().size(), " samples but the one for '", names_[0], "' holds ",
              sources_[0].size(), "; every input needs the same samples");
  }
}

NamedTensors InputSources::gather(const std::vector<int64_t>& rows, NamedTensors reuse) const {
  NamedTensors out;
  for (size_t i = 0; i < sources_.size(); ++i)
    out.set(names_[i], sources_[i].gather(rows, reuse.has(names_[i]) ? std::move(reuse.at(names_[i])) : Tensor()));
  return out;
}

NamedTensors InputSources::all() const {
  NamedTensors out;
  for (size_t i = 0; i < sources_.size(); ++i) out.set(names_[i], sources_[i].all());
  return out;
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

Tensor token_ids(const Dataset& d, const NamedTensors& bound) {
  if (bound.has("input_ids")) return bound.at("input_ids");
  std::vector<std::string> integer;
  for (const auto& n : bound.names())
    if (dtype_is_integer(bound.at(n).dtype()) && bound.at(n).dtype() != DType::kBool) integer.push_back(n);
  OMT_CHECK(integer.size() == 1, kInvalidArgument, "--shift-labels: '", d.source, "' has no label array '",
            d.label_name.empty() ? "labels" : d.label_name, "' and ", integer.empty() ? "no" : "more than one",
            " integer model input to take the token ids from; name the input 'input_ids' or store the labels "
            "(the token ids) as 'labels'");
  return bound.at(integer[0]);
}

LabelSource LabelSource::shifted(Tensor ids, int64_t ignore_index) {
  OMT_ASSERT(ids.rank() == 2 && (ids.dtype() == DType::kUInt16 || ids.dtype() == DType::kUInt32),
             "shifted labels of token windows, not ", ids.describe());
  LabelSource s(std::move(ids));
  s.shifted_ = true;
  s.ignore_index_ = ignore_index;
  return s;
}

Tensor LabelSource::gather(const std::vector<int64_t>& rows) const {
  if (!shifted_) return gather_rows(labels_, rows);
  // Note [Shifted labels], per window: the same values shift_labels gives the whole array.
  const int64_t t = labels_.dim(1);
  Tensor out = Tensor::empty(DType::kInt64, {static_cast<int64_t>(rows.size()), t});
  int64_t* dst = out.data<int64_t>();
  const size_t row_bytes = static_cast<size_t>(t) * dtype_size(labels_.dtype());
  for_each_row_prefetched(static_cast<const char*>(labels_.raw()), rows, row_bytes, [&](const char* from, size_t i) {
    int64_t* y = dst + static_cast<int64_t>(i) * t;
    if (labels_.dtype() == DType::kUInt16)
      widen_row<uint16_t>(from + sizeof(uint16_t), y, t - 1);
    else
      widen_row<uint32_t>(from + sizeof(uint32_t), y, t - 1);
    y[t - 1] = ignore_index_;
  });
  return out;
}

Tensor LabelSource::rows(int64_t begin, int64_t end) const {
  std::vector<int64_t> r(static_cast<size_t>(end - begin));
  for (int64_t i = begin; i < end; ++i) r[static_cast<size_t>(i - begin)] = i;
  return gather(r);
}

int64_t LabelSource::counted(const std::vector<int64_t>& rows, int64_t ignore_index) const {
  if (!shifted_) return counted_labels(labels_, rows, ignore_index);
  // Unsigned ids are never a negative ignore index: every position but the last counts.
  if (ignore_index < 0 && ignore_index == ignore_index_) return static_cast<int64_t>(rows.size()) * (labels_.dim(1) - 1);
  int64_t n = 0;
  for (size_t b = 0; b < rows.size(); b += 1024) {
    const std::vector<int64_t> part(rows.begin() + static_cast<long>(b),
                                    rows.begin() + static_cast<long>(std::min(rows.size(), b + 1024)));
    n += counted_labels(gather(part), ignore_index);
  }
  return n;
}

int64_t LabelSource::counted(int64_t ignore_index) const {
  if (!shifted_) return counted_labels(labels_, ignore_index);
  std::vector<int64_t> all(static_cast<size_t>(size()));
  for (int64_t i = 0; i < size(); ++i) all[static_cast<size_t>(i)] = i;
  return counted(all, ignore_index);
}

int64_t counted_labels(const Tensor& labels, int64_t ignore_index) {
  const int64_t* y = labels.data<int64_t>();
  return labels.numel() - std::count(y, y + labels.numel(), ignore_index);
}

int64_t counted_labels(const Tensor& labels, const std::vector<int64_t>& rows, int64_t ignore_index) {
  const int64_t per_row = labels.dim(0) ? labels.numel() / labels.dim(0) : 0;
  const int64_t* y = labels.data<int64_t>();
  int64_t counted = 0;
  for (int64_t r : rows) counted += per_row - std::count(y + r * per_row, y + (r + 1) * per_row, ignore_index);
  return counted;
}

}  // namespace omt

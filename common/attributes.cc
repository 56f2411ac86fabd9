#include "common/attributes.h"

namespace omt {

template <class T>
const T* AttributeMap::find(const std::string& name) const {
  auto it = attrs_.find(name);
  if (it == attrs_.end()) return nullptr;
  const T* v = std::get_if<T>(&it->second);
  OMT_CHECK(v != nullptr, kModel, "attribute '", name, "' has the wrong type");
  return v;
}

int64_t AttributeMap::get_int(const std::string& name, int64_t fallback) const {
  const int64_t* v = find<int64_t>(name);
  return v ? *v : fallback;
}

int64_t AttributeMap::get_int(const std::string& name) const {
  const int64_t* v = find<int64_t>(name);
  OMT_CHECK(v != nullptr, kModel, "required attribute '", name, "' is missing");
  return *v;
}

float AttributeMap::get_float(const std::string& name, float fallback) const {
  const float* v = find<float>(name);
  return v ? *v : fallback;
}

std::string AttributeMap::get_string(const std::string& name, const std::string& fallback) const {
  const std::string* v = find<std::string>(name);
  return v ? *v : fallback;
}

std::vector<int64_t> AttributeMap::get_ints(const std::string& name,
                                            const std::vector<int64_t>& fallback) const {
  const auto* v = find<std::vector<int64_t>>(name);
  return v ? *v : fallback;
}

std::vector<float> AttributeMap::get_floats(const std::string& name,
                                            const std::vector<float>& fallback) const {
  const auto* v = find<std::vector<float>>(name);
  return v ? *v : fallback;
}

const Tensor& AttributeMap::get_tensor(const std::string& name) const {
  const Tensor* v = find<Tensor>(name);
  OMT_CHECK(v != nullptr, kModel, "required tensor attribute '", name, "' is missing");
  return *v;
}

}  // namespace omt

// Node attributes, shared by graph/ (which stores them) and backends/ (whose kernels read
// them when they are created). Getters name the attribute and the node on a type error.
#pragma once

#include <map>
#include <string>
#include <variant>
#include <vector>

#include "common/tensor.h"

namespace omt {

using Attribute = std::variant<int64_t, float, std::string, std::vector<int64_t>,
                               std::vector<float>, std::vector<std::string>, Tensor>;

class AttributeMap {
 public:
  void set(const std::string& name, Attribute value) { attrs_[name] = std::move(value); }
  bool has(const std::string& name) const { return attrs_.count(name) != 0; }
  const std::map<std::string, Attribute>& all() const { return attrs_; }

  int64_t get_int(const std::string& name, int64_t fallback) const;
  int64_t get_int(const std::string& name) const;
  float get_float(const std::string& name, float fallback) const;
  std::string get_string(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> get_ints(const std::string& name,
                                const std::vector<int64_t>& fallback = {}) const;
  std::vector<float> get_floats(const std::string& name,
                                const std::vector<float>& fallback = {}) const;
  const Tensor& get_tensor(const std::string& name) const;

 private:
  template <class T>
  const T* find(const std::string& name) const;
  std::map<std::string, Attribute> attrs_;
};

}  // namespace omt

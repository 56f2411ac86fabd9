#include "graph/buckets.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

namespace omt {

namespace {
constexpr int64_t kAlignElements = 16;  // 64 bytes of float32
int64_t align_up(int64_t n) { return (n + kAlignElements - 1) / kAlignElements * kAlignElements; }
}  // namespace

int64_t BucketPlan::total_bytes() const {
  int64_t b = 0;
  for (const auto& k : buckets) b += k.bytes();
  return b;
}

BucketPlan plan_buckets(const std::vector<GradientInfo>& grads, int64_t cap_bytes,
                        int64_t first_bucket_bytes) {
  BucketPlan plan;
  Bucket current;
  auto cap_of = [&] { return (plan.buckets.empty() ? first_bucket_bytes : cap_bytes) / 4; };
  for (const auto& g : grads) {
    const int64_t start = align_up(current.elements);
    if (!current.slots.empty() && start + g.elements > cap_of()) {
      plan.buckets.push_back(current);
      current = Bucket();
    }
    const int64_t offset = align_up(current.elements);
    current.slots.push_back({g.param, g.grad, offset, g.elements});
    current.elements = offset + g.elements;
    current.ready_node = std::max(current.ready_node, g.ready_node);
  }
  if (!current.slots.empty()) plan.buckets.push_back(current);
  for (auto& b : plan.buckets) b.elements = align_up(b.elements);
  return plan;
}

std::string BucketPlan::explain(const std::vector<std::string>& node_names) const {
  std::ostringstream os;
  os << buckets.size() << " bucket(s), " << std::fixed << std::setprecision(2)
     << total_bytes() / 1048576.0 << " MiB in all, reduced in this order:\n";
  for (size_t i = 0; i < buckets.size(); ++i) {
    const Bucket& b = buckets[i];
    os << "  bucket " << i << ": " << b.slots.size() << " gradient(s), " << std::setprecision(3)
       << b.bytes() / 1048576.0 << " MiB, ready after node " << b.ready_node;
    if (b.ready_node >= 0 && static_cast<size_t>(b.ready_node) < node_names.size())
      os << " ('" << node_names[b.ready_node] << "')";
    os << "\n";
    for (const auto& s : b.slots)
      os << "      " << s.param << "  " << s.elements << " values at offset " << s.offset << "\n";
  }
  return os.str();
}

}  // namespace omt

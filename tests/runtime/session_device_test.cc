// Note [Where values live] without a GPU: a fake device backend whose memory is host memory
// labelled as another device's, with counted copies. It checks what the Session promises a
// GPU backend: host feeds uploaded once per run into a reused buffer, initializers once per
// Session, host readers given the host original, outputs left in device memory, device feeds
// and bound buffers handled, and other devices' memory refused.
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/session.h"

namespace omt {
namespace {

constexpr Device kFakeDevice{DeviceKind::kCuda, 5};

struct Counters {
  int uploads = 0, downloads = 0, copies = 0, allocations = 0;
};
Counters& counters() {
  static Counters c;
  return c;
}

void require_device(const Tensor& t, const std::string& what) {
  OMT_CHECK(t.device() == kFakeDevice, kInternal, what, " is on ", t.device().str(), ", not on the fake device");
}

// test:Add(a, b) -> a + b, both read in device memory.
class AddKernel : public OpKernel {
 public:
  void compute(KernelContext& ctx) override {
    const Tensor& a = ctx.in(0);
    const Tensor& b = ctx.in(1);
    require_device(a, "Add's a");
    require_device(b, "Add's b");
    Tensor& out = ctx.output(0, DType::kFloat32, a.shape());
    require_device(out, "Add's output");
    const auto* pa = static_cast<const float*>(a.raw());
    const auto* pb = static_cast<const float*>(b.raw());
    auto* po = static_cast<float*>(out.raw());
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = pa[i] + pb[i];
  }
};

// test:Scale(x, factor) -> x * factor[0]; the factor is read on the host.
class ScaleKernel : public OpKernel {
 public:
  InputUse input_use(int i) const override { return i == 1 ? InputUse::kHost : InputUse::kBackend; }
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    require_device(x, "Scale's x");
    OMT_CHECK(ctx.in(1).on_host(), kInternal, "Scale's factor is not on the host");
    const float f = static_cast<float>(ctx.in(1).value_as_double(0));
    Tensor& out = ctx.output(0, DType::kFloat32, x.shape());
    const auto* px = static_cast<const float*>(x.raw());
    auto* po = static_cast<float*>(out.raw());
    for (int64_t i = 0; i < x.numel(); ++i) po[i] = px[i] * f;
  }
};

// test:AddInPlace(p, g) -> p + g written into p and handed out (as the optimizers do).
class AddInPlaceKernel : public OpKernel {
 public:
  void compute(KernelContext& ctx) override {
    const Tensor& p = ctx.in(0);
    require_device(p, "AddInPlace's p");
    auto* pp = static_cast<float*>(const_cast<void*>(p.raw()));
    const auto* pg = static_cast<const float*>(ctx.in(1).raw());
    for (int64_t i = 0; i < p.numel(); ++i) pp[i] += pg[i];
    ctx.set_output(0, p);
  }
};

class FakeDeviceBackend final : public Backend {
 public:
  std::string name() const override { return "fakedev"; }
  Device device() const override { return kFakeDevice; }
  bool supports(const std::string& domain, const std::string& op) const override {
    return domain == "test" && (op == "Add" || op == "Scale" || op == "AddInPlace");
  }
  std::unique_ptr<OpKernel> create_kernel(const KernelInfo& info) const override {
    for (const Tensor* c : info.constant_inputs)
      OMT_CHECK(c == nullptr || c->on_host(), kInternal, info.where(), ": a constant input is not a host value");
    if (info.op_type == "Add") return std::make_unique<AddKernel>();
    if (info.op_type == "Scale") return std::make_unique<ScaleKernel>();
    return std::make_unique<AddInPlaceKernel>();
  }
  Tensor allocate(DType dtype, const Shape& shape) override {
    ++counters().allocations;
    Tensor host = Tensor::empty(dtype, shape);
    return Tensor::wrap(dtype, shape, host.raw(), std::make_shared<Tensor>(host), kFakeDevice);
  }
  void copy_from_host(const void* src, Tensor& dst) override {
    require_device(dst, "upload target");
    ++counters().uploads;
    std::memcpy(dst.raw(), src, dst.nbytes());
  }
  void copy_to_host(const Tensor& src, void* dst) override {
    require_device(src, "download source");
    ++counters().downloads;
    std::memcpy(dst, src.raw(), src.nbytes());
  }
  void copy(const Tensor& src, Tensor& dst) override {
    ++counters().copies;
    std::memcpy(dst.raw(), src.raw(), src.nbytes());
  }
};

BackendRegistrar register_fake("fakedev", [](int) -> std::shared_ptr<Backend> {
  return std::make_shared<FakeDeviceBackend>();
});

ValueInfo vec(const std::string& name, int64_t n) {
  ValueInfo v;
  v.name = name;
  v.dtype = DType::kFloat32;
  v.shape = std::vector<Dim>{Dim{n, ""}};
  return v;
}

Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
  Node n;
  n.name = out[0] + "_node";
  n.op_type = op;
  n.domain = "test";
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

// out = Scale(Add(Add(x, w), x), s): x is read twice in device memory, w is an initializer
// read in device memory, s an initializer read only on the host.
std::shared_ptr<const Model> scale_model() {
  auto m = std::make_shared<Model>();
  m->source_path = "scale_model";
  m->graph.inputs = {vec("x", 4)};
  m->graph.outputs = {vec("out", 4)};
  m->graph.initializers.set("w", Tensor::from_vector<float>({10, 20, 30, 40}, {4}));
  m->graph.initializers.set("s", Tensor::from_vector<float>({2}, {1}));
  m->graph.nodes = {node("Add", {"x", "w"}, {"y"}), node("Add", {"y", "x"}, {"z"}), node("Scale", {"z", "s"}, {"out"})};
  return m;
}

SessionOptions fake() {
  SessionOptions o;
  o.device = "fakedev";
  return o;
}

NamedTensors feed_x(std::vector<float> x) {
  NamedTensors f;
  f.set("x", Tensor::from_vector<float>(x, {4}));
  return f;
}

TEST(SessionOnADevice, FeedsUploadOncePerRunInitializersOncePerSession) {
  counters() = {};
  Session s(scale_model(), fake());
  EXPECT_EQ(counters().uploads, 1) << "w once at build; s stays on the host";
  for (int run = 0; run < 3; ++run) {
    const Counters before = counters();
    Tensor out = s.run(feed_x({1, 2, 3, 4})).at("out");
    EXPECT_EQ(counters().uploads - before.uploads, 1) << "x once, though two kernels read it; run " << run;
    EXPECT_EQ(counters().downloads, before.downloads) << "outputs stay in device memory";
    EXPECT_EQ(out.device(), kFakeDevice);
    EXPECT_EQ(s.backend().to_host(out).to_vector<float>(), (std::vector<float>{24, 48, 72, 96}));
    out = Tensor();
    // Note [Buffer reuse]: once warm, nothing is allocated, the upload buffer included.
    if (run > 0) {
      EXPECT_EQ(counters().allocations - before.allocations, 0) << "run " << run;
    }
  }
}

TEST(SessionOnADevice, DeviceFeedsAreNotCopied) {
  Session s(scale_model(), fake());
  const Tensor host = Tensor::from_vector<float>({1, 1, 1, 1}, {4});
  NamedTensors f;
  f.set("x", s.backend().to_backend(host));
  const Counters before = counters();
  const Tensor out = s.run(f).at("out");
  EXPECT_EQ(counters().uploads, before.uploads);
  EXPECT_EQ(s.backend().to_host(out).to_vector<float>(), (std::vector<float>{24, 44, 64, 84}));
}

TEST(SessionOnADevice, HostReadersOfAnUploadedFeedGetTheCallersTensor) {
  // out = Scale(Add(x, w), x): x is uploaded for Add; Scale reads its first element on the host.
  auto m = std::make_shared<Model>(*scale_model());
  m->graph.nodes = {node("Add", {"x", "w"}, {"y"}), node("Scale", {"y", "x"}, {"out"})};
  Session s(m, fake());
  const Tensor out = s.run(feed_x({3, 0, 0, 0})).at("out");
  EXPECT_EQ(s.backend().to_host(out).to_vector<float>(), (std::vector<float>{39, 60, 90, 120}));
}

TEST(SessionOnADevice, InPlaceUpdatesIntoABoundHostBufferAreDownloaded) {
  auto m = std::make_shared<Model>();
  m->source_path = "in_place";
  m->graph.inputs = {vec("p", 3), vec("g", 3)};
  m->graph.outputs = {vec("p_new", 3)};
  m->graph.nodes = {node("AddInPlace", {"p", "g"}, {"p_new"})};
  Session s(m, fake());
  Tensor bound = Tensor::zeros(DType::kFloat32, {3});
  s.bind_output("p_new", bound);
  NamedTensors f;
  f.set("p", Tensor::from_vector<float>({1, 2, 3}, {3}));
  f.set("g", Tensor::from_vector<float>({10, 10, 10}, {3}));
  const Counters before = counters();
  const Tensor out = s.run(f).at("p_new");
  EXPECT_EQ(counters().uploads - before.uploads, 2);
  EXPECT_EQ(counters().downloads - before.downloads, 1) << "the update into the host buffer";
  EXPECT_TRUE(out.same_storage(bound));
  EXPECT_EQ(bound.to_vector<float>(), (std::vector<float>{11, 12, 13}));
  EXPECT_EQ(f.at("p").to_vector<float>(), (std::vector<float>{1, 2, 3})) << "the caller's feed is never written";
}

TEST(SessionOnADevice, AnotherDevicesMemoryIsRefused) {
  Session s(scale_model(), fake());
  const Tensor host = Tensor::from_vector<float>({1, 2, 3, 4}, {4});
  NamedTensors f;
  f.set("x", Tensor::wrap(DType::kFloat32, {4}, const_cast<void*>(host.raw()), std::make_shared<Tensor>(host),
                          Device{DeviceKind::kCuda, 1}));
  try {
    s.run(f);
    FAIL() << "a cuda:1 feed was accepted by a session on cuda:5";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    for (const char* part : {"'x'", "cuda:1", "cuda:5", "host memory"})
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << part << ": " << e.what();
  }
}

TEST(SessionOnADevice, SessionsShareABackendInstance) {
  auto backend = get_backend("fakedev");
  SessionOptions o;
  o.backend = backend;
  Session a(scale_model(), o), b(scale_model(), o);
  EXPECT_EQ(&a.backend(), backend.get());
  EXPECT_EQ(&b.backend(), backend.get());
}

}  // namespace
}  // namespace omt

// read_arrays / write_npz over the runtime's npy/npz reader and writer, in file order.
#include "onnx_mirror/arrays.h"

#include "api/internal.h"
#include "runtime/data/npy.h"

namespace onnx_mirror {

TensorList read_arrays(const std::string& path) {
  return detail::guarded([&] {
    const omt::NamedTensors in = omt::read_arrays(path);
    TensorList out;
    for (const auto& name : in.names()) out.emplace_back(name, detail::to_public(in.at(name)));
    return out;
  });
}

void write_npz(const std::string& path, const TensorList& arrays) {
  detail::guarded([&] {
    omt::NamedTensors out;
    for (const auto& [name, t] : arrays) {
      OMT_CHECK(!out.has(name), kInvalidArgument, "write_npz got two arrays named '", name, "' for '", path, "'");
      out.set(name, detail::to_internal(t));
    }
    omt::write_npz(path, out);
  });
}

}  // namespace onnx_mirror

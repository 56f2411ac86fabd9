// check_output_path over common/file_util's.
#include "onnx_mirror/files.h"

#include "api/internal.h"
#include "common/file_util.h"

namespace onnx_mirror {

void check_output_path(const std::string& path, const std::string& option, OutputKind kind) {
  detail::guarded([&] {
    omt::check_output_path(path, option,
                           kind == OutputKind::kFolder   ? omt::OutputKind::kFolder
                           : kind == OutputKind::kStream ? omt::OutputKind::kStream
                                                         : omt::OutputKind::kFile);
  });
}

}  // namespace onnx_mirror

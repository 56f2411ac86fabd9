// A fixture of check_layering.sh: ONNX protobuf outside graph/onnx_io.cc.
#include <onnx/onnx_pb.h>

// Ops through which no gradient flows, stated explicitly so that autodiff can tell "no
// gradient by definition" from "rule missing": integer or boolean outputs, shape metadata,
// constants, and piecewise-constant functions whose derivative is zero almost everywhere.
#include "graph/gradient.h"

namespace omt {
namespace {

OMT_REGISTER_NO_GRADIENT("Shape", "its output is integer shape metadata");
OMT_REGISTER_NO_GRADIENT("Size", "its output is an integer element count");
OMT_REGISTER_NO_GRADIENT("Constant", "it has no inputs");
OMT_REGISTER_NO_GRADIENT("ConstantOfShape", "its input is an integer shape; the value is an attribute");
OMT_REGISTER_NO_GRADIENT("Range", "its output is piecewise constant in start, limit and delta");
OMT_REGISTER_NO_GRADIENT("EyeLike", "its input only provides a shape");
OMT_REGISTER_NO_GRADIENT("OneHot", "its indices are integers and its output does not depend smoothly on them");

OMT_REGISTER_NO_GRADIENT("Equal", "its output is boolean");
OMT_REGISTER_NO_GRADIENT("Greater", "its output is boolean");
OMT_REGISTER_NO_GRADIENT("Less", "its output is boolean");
OMT_REGISTER_NO_GRADIENT("GreaterOrEqual", "its output is boolean");
OMT_REGISTER_NO_GRADIENT("LessOrEqual", "its output is boolean");
OMT_REGISTER_NO_GRADIENT("Not", "it is a boolean op");
OMT_REGISTER_NO_GRADIENT("And", "it is a boolean op");
OMT_REGISTER_NO_GRADIENT("Or", "it is a boolean op");
OMT_REGISTER_NO_GRADIENT("Xor", "it is a boolean op");
OMT_REGISTER_NO_GRADIENT("IsNaN", "its output is boolean");
OMT_REGISTER_NO_GRADIENT("IsInf", "its output is boolean");
OMT_REGISTER_NO_GRADIENT("BitShift", "it is an integer op");
OMT_REGISTER_NO_GRADIENT("NonZero", "its output is integer indices");
OMT_REGISTER_NO_GRADIENT("ArgMax", "its output is integer indices");
OMT_REGISTER_NO_GRADIENT("ArgMin", "its output is integer indices");

OMT_REGISTER_NO_GRADIENT("Floor", "its derivative is zero almost everywhere (as in PyTorch)");
OMT_REGISTER_NO_GRADIENT("Ceil", "its derivative is zero almost everywhere (as in PyTorch)");
OMT_REGISTER_NO_GRADIENT("Round", "its derivative is zero almost everywhere (as in PyTorch)");
OMT_REGISTER_NO_GRADIENT("Sign", "its derivative is zero almost everywhere (as in PyTorch)");
OMT_REGISTER_NO_GRADIENT("Hardmax", "its output is piecewise constant (a one-hot of the argmax)");

}  // namespace
}  // namespace omt

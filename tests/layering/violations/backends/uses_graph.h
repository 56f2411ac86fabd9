// A fixture of check_layering.sh: a backend including graph/ and runtime/.
#include "graph/ir.h"
#include "runtime/session.h"

// A fixture of check_layering.sh: a tool reaching below the public API.
#include "runtime/fit.h"
